package simulator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// RunConfig shapes the demo trickle of [CAD.Run]. Zero fields take the
// defaults.
type RunConfig struct {
	// Interval between the starts of two scenarios (default 8 s), varied by
	// up to ±Jitter (default Interval/4).
	Interval time.Duration
	Jitter   time.Duration
	// MaxLive bounds the scenarios in progress at once (default 5); a new
	// one waits for a free slot.
	MaxLive int
	// Count stops after that many scenarios have run (0: until ctx ends).
	Count int
	// StepMin and StepMax bound the random wait between two steps of a
	// scenario (default 2 s to 6 s; StepMax below StepMin is StepMin). The
	// time on site is two steps.
	StepMin, StepMax time.Duration
	// Center is where the ocorrências happen (default Campinas-SP,
	// -22.9056, -47.0608), within Radius degrees (default 0.04, ~4 km).
	Center Local
	Radius float64
	// CancelChance is the probability that a despacho is cancelled while
	// en route (default 0.15; negative: never). SecondChance is the
	// probability of a second recurso (default 0.4; negative: never).
	CancelChance, SecondChance float64
}

func (r RunConfig) withDefaults() RunConfig {
	if r.Interval <= 0 {
		r.Interval = 8 * time.Second
	}
	if r.Jitter <= 0 {
		r.Jitter = r.Interval / 4
	}
	r.Jitter = min(r.Jitter, r.Interval)
	if r.MaxLive <= 0 {
		r.MaxLive = 5
	}
	if r.StepMin <= 0 {
		r.StepMin = 2 * time.Second
		if r.StepMax <= 0 {
			r.StepMax = 6 * time.Second
		}
	}
	r.StepMax = max(r.StepMax, r.StepMin)
	if r.Center == (Local{}) {
		r.Center = Local{Lat: -22.9056, Lng: -47.0608}
	}
	if r.Radius <= 0 {
		r.Radius = 0.04
	}
	if r.CancelChance == 0 {
		r.CancelChance = 0.15
	}
	if r.SecondChance == 0 {
		r.SecondChance = 0.4
	}
	return r
}

// Run starts a scenario at once and then one every Interval (± Jitter),
// at most MaxLive at a time, until ctx ends or Count scenarios have run. A
// failing scenario is logged and the trickle goes on. Run returns when
// every scenario it started has returned: ctx's error if ctx ended, else
// nil.
func (c *CAD) Run(ctx context.Context, cfg RunConfig) error {
	cfg = cfg.withDefaults()
	slots := make(chan struct{}, cfg.MaxLive)
	var wg sync.WaitGroup
	defer wg.Wait()
	for n := 0; cfg.Count == 0 || n < cfg.Count; n++ {
		if n > 0 {
			d := cfg.Interval - cfg.Jitter + time.Duration(c.float64()*float64(2*cfg.Jitter))
			if c.wait(ctx, d) != nil {
				break
			}
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			id, err := c.RunScenario(ctx, cfg)
			switch {
			case err == nil:
				c.log.Info("scenario done", "ocorrencia", id)
			case ctx.Err() != nil:
				c.log.Debug("scenario stopped", "ocorrencia", id)
			default:
				c.log.Warn("scenario failed", "ocorrencia", id, "error", err)
			}
		})
	}
	wg.Wait()
	return ctx.Err()
}

// natureza is one kind of ocorrência: descriptions and the prefixes of the
// resources that attend it (ABT auto bomba tanque, UR unidade de resgate,
// USA/USB ambulâncias de suporte avançado/básico do SAMU, VTR viatura da
// PM/GCM, ABS auto busca e salvamento, DC Defesa Civil).
type natureza struct {
	nome      string
	descricao []string
	recursos  []string
}

var naturezas = []natureza{
	{"incendio", []string{
		"Incêndio em residência, fumaça visível da rua",
		"Fogo em vegetação às margens da via",
		"Incêndio em veículo estacionado",
		"Princípio de incêndio em comércio",
	}, []string{"ABT", "ABT", "UR"}},
	{"acidente_transito", []string{
		"Colisão entre carro e moto, vítima consciente",
		"Capotamento de veículo, uma vítima presa às ferragens",
		"Atropelamento de pedestre na faixa",
	}, []string{"UR", "VTR", "USA"}},
	{"resgate", []string{
		"Pessoa presa em elevador",
		"Queda de altura em obra, vítima no local",
		"Criança presa em veículo trancado",
	}, []string{"UR", "ABS"}},
	{"atendimento_medico", []string{
		"Idoso com dor no peito",
		"Convulsão em via pública",
		"Gestante em trabalho de parto",
	}, []string{"USA", "USB"}},
	{"alagamento", []string{
		"Rua alagada, veículos ilhados",
		"Água invadindo residências após chuva forte",
	}, []string{"DC", "ABS", "VTR"}},
	{"queda_arvore", []string{
		"Árvore caída sobre a fiação elétrica",
		"Galho grande bloqueando a pista",
		"Árvore caída sobre veículo",
	}, []string{"DC", "ABT"}},
}

var (
	ruas = []string{
		"Rua Barão de Jaguara", "Avenida Francisco Glicério", "Rua José Paulino",
		"Avenida Norte-Sul", "Rua Treze de Maio", "Avenida Brasil",
		"Rua Sete de Setembro", "Avenida Orosimbo Maia", "Rua Conceição",
		"Avenida Aquidabã", "Rua Coronel Quirino", "Avenida Moraes Salles",
	}
	bairros = []string{
		"Centro", "Cambuí", "Taquaral", "Barão Geraldo", "Vila Industrial",
		"Jardim Proença", "Castelo", "Botafogo", "Guanabara", "Ponte Preta",
	}
)

func (c *CAD) pick(list []string) string { return list[c.intN(len(list))] }

// step waits a random step of cfg; false if ctx ended.
func (c *CAD) step(ctx context.Context, cfg RunConfig, n int) bool {
	span := cfg.StepMax - cfg.StepMin
	d := cfg.StepMin + time.Duration(c.float64()*float64(span))
	return c.wait(ctx, time.Duration(n)*d) == nil
}

// newRegister invents a plausible ocorrência and the resources it needs.
func (c *CAD) newRegister(cfg RunConfig) (RegisterRequest, []string) {
	n := naturezas[c.intN(len(naturezas))]
	// Uniform in a disc of Radius around Center.
	r := cfg.Radius * math.Sqrt(c.float64())
	theta := 2 * math.Pi * c.float64()
	local := Local{
		Lat: round6(cfg.Center.Lat + r*math.Sin(theta)),
		Lng: round6(cfg.Center.Lng + r*math.Cos(theta)),
	}
	req := RegisterRequest{
		Natureza:  n.nome,
		Descricao: c.pick(n.descricao),
		Endereco:  fmt.Sprintf("%s, %d - %s", c.pick(ruas), 10+c.intN(3000), c.pick(bairros)),
		Local:     &local,
	}
	count := 1
	if c.float64() < cfg.SecondChance {
		count = 2
	}
	var recursos []string
	for len(recursos) < count {
		id := fmt.Sprintf("%s-%02d", c.pick(n.recursos), 1+c.intN(30))
		if !slices.Contains(recursos, id) {
			recursos = append(recursos, id)
		}
	}
	return req, recursos
}

func round6(f float64) float64 { return math.Round(f*1e6) / 1e6 }

// RunScenario plays one ocorrência from the CAD's side: register, dispatch
// one or two recursos, move each em_deslocamento → no_local → liberado (or
// cancel it en route), then close the ocorrência. It returns the
// ocorrência's id (empty if registering failed) and the first error that
// stopped it. A refused despacho step (409: e.g. an operator moved it
// first) is logged and that despacho left alone.
func (c *CAD) RunScenario(ctx context.Context, cfg RunConfig) (string, error) {
	cfg = cfg.withDefaults()
	req, recursos := c.newRegister(cfg)
	o, err := c.Register(ctx, req)
	if err != nil {
		return "", fmt.Errorf("register: %w", err)
	}
	log := c.log.With("ocorrencia", o.ID, "natureza", req.Natureza)
	log.Info("ocorrência registered", "endereco", req.Endereco)

	var despachos []Despacho
	for _, rec := range recursos {
		if !c.step(ctx, cfg, 1) {
			return o.ID, ctx.Err()
		}
		r, err := c.Dispatch(ctx, o.ID, rec)
		if err != nil {
			if ctx.Err() != nil {
				return o.ID, ctx.Err()
			}
			log.Warn("dispatch refused", "recurso", rec, "error", err)
			continue
		}
		if r.Despacho == nil {
			log.Warn("dispatch response without despacho", "recurso", rec)
			continue
		}
		log.Info("dispatched", "recurso", rec, "despacho", r.Despacho.ID)
		despachos = append(despachos, *r.Despacho)
	}

	var wg sync.WaitGroup
	for _, d := range despachos {
		wg.Go(func() { c.followDespacho(ctx, cfg, d) })
	}
	wg.Wait()
	if !c.step(ctx, cfg, 1) {
		return o.ID, ctx.Err()
	}
	if _, err := c.SetStatus(ctx, o.ID, StatusEncerrada); err != nil {
		return o.ID, fmt.Errorf("close: %w", err)
	}
	log.Info("ocorrência closed")
	return o.ID, nil
}

// followDespacho moves one despacho to its end.
func (c *CAD) followDespacho(ctx context.Context, cfg RunConfig, d Despacho) {
	log := c.log.With("ocorrencia", d.OcorrenciaID, "despacho", d.ID, "recurso", d.Recurso.Identificador)
	move := func(para string) bool {
		_, err := c.SetDispatchStatus(ctx, d.OcorrenciaID, d.ID, para)
		if err == nil {
			log.Info("despacho moved", "para", para)
			return true
		}
		var apiErr *APIError
		if errors.As(err, &apiErr) {
			log.Warn("despacho move refused", "para", para, "error", err)
		} else if ctx.Err() == nil {
			log.Warn("despacho move failed", "para", para, "error", err)
		}
		return false
	}
	if !c.step(ctx, cfg, 1) {
		return
	}
	if cfg.CancelChance > 0 && c.float64() < cfg.CancelChance {
		move(DespachoCancelado)
		return
	}
	if !move(DespachoNoLocal) || !c.step(ctx, cfg, 2) {
		return
	}
	move(DespachoLiberado)
}
