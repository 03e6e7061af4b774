package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"geohub/app/redact"
)

// Type statuses.
const (
	StatusAtivo     = "ativo"
	StatusDeprecado = "deprecado"
)

// Audiences: who receives a type's events (SPEC 6.2). These are the only
// routes a dispatcher knows, so a type naming anything else is refused.
const (
	AudienciaOriginador  = "originador"
	AudienciaTodos       = "todos"
	AudienciaSolicitante = "solicitante"
)

// TypeVersion is one registered (tipo, versao).
type TypeVersion struct {
	Tipo      string          `json:"tipo"`
	Versao    string          `json:"versao"`
	Status    string          `json:"status"`
	Audiencia string          `json:"audiencia"`
	Schema    json.RawMessage `json:"schema"`
	Redacao   redact.Rules    `json:"redacao"`
	CriadoEm  time.Time       `json:"criado_em"`
}

// UnmarshalJSON decodes strictly and names an unknown field inside redacao
// at /redacao/... (see Autoria.UnmarshalJSON).
func (tv *TypeVersion) UnmarshalJSON(b []byte) error {
	type fields TypeVersion // without this method
	err := decodeNested(b, (*fields)(tv), "")
	if err == nil {
		return nil
	}
	// The unknown key may be at the top or inside redacao: look there.
	var inner struct {
		Redacao json.RawMessage `json:"redacao"`
	}
	if json.Unmarshal(b, &inner) == nil && inner.Redacao != nil {
		if rerr := decodeNested(inner.Redacao, new(redact.Rules), "/redacao"); rerr != nil {
			return rerr
		}
	}
	return err
}

// RegistryStore keeps type versions.
type RegistryStore interface {
	AuditLog
	TypeVersions(ctx context.Context) ([]TypeVersion, error)
	// InsertTypeVersion stores tv unless (tipo, versao) exists, in which case
	// it returns the existing row and false. The audit entry (nil: none) is
	// written with the row, only when the row is new.
	InsertTypeVersion(ctx context.Context, tv TypeVersion, audit *AuditEntry) (TypeVersion, bool, error)
	SetTypeStatus(ctx context.Context, tipo, versao, status string, audit *AuditEntry) error
}

var (
	tipoPattern   = regexp.MustCompile(`^[a-z][a-z0-9-]*(:[a-z][a-z0-9-]*)+$`)
	semverPattern = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)
)

// compiled is a type version ready for the publish path.
type compiled struct {
	TypeVersion
	schema *jsonschema.Schema
	rules  *redact.Program
}

// Registry validates and serves event types. It keeps every version compiled
// in memory: validation sits on the hot path of every publish.
type Registry struct {
	store RegistryStore
	now   func() time.Time

	writeMu sync.Mutex // serialises changes
	// refreshMu makes Refreshes take turns (the poll, a notification, a
	// lookup's read-through): one that read the store earlier must not
	// apply its older statuses after a later one applied newer.
	refreshMu sync.Mutex
	mu        sync.RWMutex
	versions  map[string]*compiled // key tipo + "@" + versao
	builtin   map[string]bool      // versions the built-in plugins publish: never deprecated
	// missRead is when a lookup last read the store for a version this
	// process did not know (unix nanoseconds; see lookup).
	missRead atomic.Int64
}

// missReadEvery spaces the store reads of lookups that miss: publishes of
// types nobody registered must not each cost a read of the registry.
const missReadEvery = 100 * time.Millisecond

// NewRegistry loads every stored version and compiles it.
func NewRegistry(ctx context.Context, store RegistryStore, now func() time.Time) (*Registry, error) {
	r := &Registry{store: store, now: now, versions: map[string]*compiled{}}
	all, err := store.TypeVersions(ctx)
	if err != nil {
		return nil, fmt.Errorf("load registry: %w", err)
	}
	for _, tv := range all {
		c, err := compile(tv)
		if err != nil {
			return nil, fmt.Errorf("compile stored %s@%s: %w", tv.Tipo, tv.Versao, err)
		}
		r.versions[tv.Tipo+"@"+tv.Versao] = c
	}
	return r, nil
}

// Register adds a type version. Registering identical content again is a
// no-op (created=false); different content for a published version is a
// conflict, because events already published were validated against it.
func (r *Registry) Register(ctx context.Context, tv TypeVersion) (_ TypeVersion, _ bool, err error) {
	audit := NewAudit(ctx, AcaoRegistroRegistrar, AuditTarget{Tipo: "registro", ID: tv.Tipo + "@" + tv.Versao})
	defer func() { recordRefusal(ctx, r.store, audit, err) }()
	if tv.Status == "" {
		tv.Status = StatusAtivo
	}
	c, err := compile(tv)
	if err != nil {
		return TypeVersion{}, false, err
	}
	if err := checkNewSchema(tv.Schema, c.schema); err != nil {
		// A version stored before the checks still answers an identical
		// re-registration with 200, as SPEC 5 has it.
		r.mu.RLock()
		old, ok := r.versions[tv.Tipo+"@"+tv.Versao]
		r.mu.RUnlock()
		if ok && sameContent(old.TypeVersion, tv) {
			return old.TypeVersion, false, nil
		}
		return TypeVersion{}, false, err
	}
	c.Schema = canonicalJSON(tv.Schema)
	c.CriadoEm = r.now().UTC()
	// The schema and rules are in the registry itself, for good: the entry
	// says what was registered, not all of it again.
	audit.Campos = []AuditField{Set("status", c.Status), Set("audiencia", c.Audiencia)}
	stored, created, err := r.store.InsertTypeVersion(ctx, c.TypeVersion, audit)
	if err != nil {
		return TypeVersion{}, false, err
	}
	if !created {
		if !sameContent(stored, c.TypeVersion) {
			return stored, false, Errorf(EConflict, "%s@%s já está registrado com outro conteúdo; publique uma nova versão", tv.Tipo, tv.Versao)
		}
		// Stored by another process (replicas starting together register
		// the built-in types at once): this one takes it as stored, or it
		// would refuse the type until Refresh (issue 27, B1).
		adopted := *c
		adopted.TypeVersion = stored
		r.mu.Lock()
		if _, ok := r.versions[tv.Tipo+"@"+tv.Versao]; !ok {
			r.versions[tv.Tipo+"@"+tv.Versao] = &adopted
		}
		r.mu.Unlock()
		return stored, false, nil
	}
	r.mu.Lock()
	r.versions[tv.Tipo+"@"+tv.Versao] = c
	r.mu.Unlock()
	return c.TypeVersion, true, nil
}

// SetStatus moves a version between ativo and deprecado.
func (r *Registry) SetStatus(ctx context.Context, tipo, versao, status string) (_ TypeVersion, err error) {
	acao := AcaoRegistroReativar
	if status == StatusDeprecado {
		acao = AcaoRegistroDescontinuar
	}
	audit := NewAudit(ctx, acao, AuditTarget{Tipo: "registro", ID: tipo + "@" + versao}, Set("status", status))
	defer func() { recordRefusal(ctx, r.store, audit, err) }()
	if status != StatusAtivo && status != StatusDeprecado {
		return TypeVersion{}, &Error{Code: EInvalid, Message: "status inválido",
			Details: []Detail{{Caminho: "/status", Mensagem: "deve ser ativo ou deprecado"}}}
	}
	// One change at a time, store then memory, so two concurrent PATCHes
	// cannot leave publishes following a status the database does not have.
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	r.mu.RLock()
	c, ok := r.versions[tipo+"@"+versao]
	builtin := r.builtin[tipo+"@"+versao]
	r.mu.RUnlock()
	if !ok {
		return TypeVersion{}, Errorf(ENotFound, "tipo %s@%s não registrado", tipo, versao)
	}
	if builtin && status == StatusDeprecado {
		return TypeVersion{}, Errorf(EConflict, "%s@%s é um tipo embutido: o plugin publica nele a cada comando, "+
			"e deprecá-lo faria todos os comandos falharem", tipo, versao)
	}
	audit.Campos = []AuditField{Changed("status", c.Status, status)}
	if err := r.store.SetTypeStatus(ctx, tipo, versao, status, audit); err != nil {
		return TypeVersion{}, err
	}
	next := *c
	next.Status = status
	r.mu.Lock()
	r.versions[tipo+"@"+versao] = &next
	r.mu.Unlock()
	return next.TypeVersion, nil
}

// Follow runs Refresh every interval until ctx ends: what another replica
// registers or descontinues is in force here within about interval (SPEC
// 12). failed hears each refresh that could not read the store.
func (r *Registry) Follow(ctx context.Context, interval time.Duration, failed func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := r.Refresh(ctx); err != nil && ctx.Err() == nil {
			failed(err)
		}
	}
}

// Refresh adopts the versions stored by another process and the status
// another gave them: the registry is the database's, this is its copy.
func (r *Registry) Refresh(ctx context.Context) error {
	r.refreshMu.Lock()
	defer r.refreshMu.Unlock()
	all, err := r.store.TypeVersions(ctx)
	if err != nil {
		return fmt.Errorf("refresh registry: %w", err)
	}
	r.mu.RLock()
	known := make(map[string]*compiled, len(r.versions))
	maps.Copy(known, r.versions)
	r.mu.RUnlock()
	changed := map[string]*compiled{}
	for _, tv := range all {
		key := tv.Tipo + "@" + tv.Versao
		switch c, ok := known[key]; {
		case !ok:
			nc, err := compile(tv)
			if err != nil {
				return fmt.Errorf("compile stored %s: %w", key, err)
			}
			changed[key] = nc
		case c.Status != tv.Status:
			next := *c
			next.Status = tv.Status
			changed[key] = &next
		}
	}
	if len(changed) == 0 {
		return nil
	}
	// Under writeMu: a change of this process's own, store then memory,
	// is not overwritten by a read taken before it.
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, c := range changed {
		if cur, ok := r.versions[key]; ok && cur != known[key] {
			continue // changed here since the read
		}
		r.versions[key] = c
	}
	return nil
}

// protect marks a version as a built-in plugin's (see RegisterBuiltinTypes).
func (r *Registry) protect(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.builtin == nil {
		r.builtin = map[string]bool{}
	}
	r.builtin[key] = true
}

// Builtin says whether a version is one the built-in plugins publish, which
// cannot be deprecated.
func (r *Registry) Builtin(tipo, versao string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.builtin[tipo+"@"+versao]
}

// version returns one stored version, or ENotFound.
func (r *Registry) version(tipo, versao string) (TypeVersion, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c, ok := r.versions[tipo+"@"+versao]
	if !ok {
		return TypeVersion{}, Errorf(ENotFound, "tipo %s@%s não registrado", tipo, versao)
	}
	return c.TypeVersion, nil
}

// List returns every version, ordered by tipo then versao.
func (r *Registry) List() []TypeVersion {
	r.mu.RLock()
	out := make([]TypeVersion, 0, len(r.versions))
	for _, c := range r.versions {
		out = append(out, c.TypeVersion)
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tipo != out[j].Tipo {
			return out[i].Tipo < out[j].Tipo
		}
		return semverLess(out[i].Versao, out[j].Versao)
	})
	return out
}

// Versions returns the versions of one type, or ENotFound.
func (r *Registry) Versions(tipo string) ([]TypeVersion, error) {
	var out []TypeVersion
	for _, tv := range r.List() {
		if tv.Tipo == tipo {
			out = append(out, tv)
		}
	}
	if len(out) == 0 {
		return nil, Errorf(ENotFound, "tipo %s não registrado", tipo)
	}
	return out, nil
}

// lookup finds the version a publish names, refusing unknown types,
// versions without schema and deprecated versions.
//
// A version this process does not know is looked for in the store before
// it is refused (read-through): another replica may have registered it a
// moment ago, and its notification not have arrived yet.
func (r *Registry) lookup(tipo, versao string) (*compiled, error) {
	r.mu.RLock()
	c, ok := r.versions[tipo+"@"+versao]
	r.mu.RUnlock()
	if !ok {
		if last := r.missRead.Load(); time.Since(time.Unix(0, last)) >= missReadEvery &&
			r.missRead.CompareAndSwap(last, time.Now().UnixNano()) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := r.Refresh(ctx)
			cancel()
			if err == nil {
				r.mu.RLock()
				c, ok = r.versions[tipo+"@"+versao]
				r.mu.RUnlock()
			}
		}
	}
	if ok {
		if c.Status == StatusDeprecado {
			return nil, &Error{Code: EInvalid, Message: fmt.Sprintf("tipo %s@%s está deprecado", tipo, versao),
				Details: []Detail{{Caminho: "/versao_schema", Mensagem: "versão descontinuada"}}}
		}
		return c, nil
	}
	if _, err := r.Versions(tipo); err != nil {
		return nil, &Error{Code: EInvalid, Message: fmt.Sprintf("tipo %s não registrado no registro", tipo),
			Details: []Detail{{Caminho: "/tipo", Mensagem: "tipo não registrado"}}}
	}
	return nil, &Error{Code: EInvalid, Message: fmt.Sprintf("tipo %s não tem schema na versão %s", tipo, versao),
		Details: []Detail{{Caminho: "/versao_schema", Mensagem: "versão sem schema"}}}
}

// compile checks a registration and prepares its schema and rules.
func compile(tv TypeVersion) (*compiled, error) {
	var details []Detail
	if !tipoPattern.MatchString(tv.Tipo) {
		details = append(details, Detail{"/tipo", "deve ter a forma família:nome, em minúsculas (ex.: ocorrencia:registrada)"})
	}
	if !semverPattern.MatchString(tv.Versao) {
		details = append(details, Detail{"/versao", "deve ser semver MAIOR.MENOR.CORRECAO (ex.: 1.0.0)"})
	}
	if tv.Status != StatusAtivo && tv.Status != StatusDeprecado {
		details = append(details, Detail{"/status", "deve ser ativo ou deprecado"})
	}
	switch tv.Audiencia {
	case AudienciaOriginador, AudienciaTodos, AudienciaSolicitante:
	case "":
		details = append(details, Detail{"/audiencia", "obrigatória: originador, todos ou solicitante"})
	default:
		details = append(details, Detail{"/audiencia", fmt.Sprintf("%q não é uma rota conhecida: use originador, todos ou solicitante", tv.Audiencia)})
	}
	c := &compiled{TypeVersion: tv}
	if len(bytes.TrimSpace(tv.Schema)) == 0 || bytes.Equal(bytes.TrimSpace(tv.Schema), []byte("null")) {
		details = append(details, Detail{"/schema", "obrigatório"})
	} else if s, err := compileSchema(tv.Schema); err != nil {
		details = append(details, Detail{"/schema", err.Error()})
	} else {
		c.schema = s
	}
	p, err := redact.Compile(tv.Redacao)
	if err != nil {
		var rerrs redact.RuleErrors
		if errors.As(err, &rerrs) {
			for _, re := range rerrs {
				details = append(details, Detail{"/redacao" + re.Path, re.Reason})
			}
		} else {
			details = append(details, Detail{"/redacao", err.Error()})
		}
	}
	c.rules = p
	if len(details) > 0 {
		return nil, &Error{Code: EInvalid, Message: "registro de tipo inválido", Details: details}
	}
	return c, nil
}

// checkNewSchema runs the checks that came after versions were first
// stored: at registration only, so a version stored before them still loads
// (NewRegistry compiles without them) and still answers an identical
// re-registration.
func checkNewSchema(raw json.RawMessage, s *jsonschema.Schema) error {
	if err := checkDraft(raw); err != nil {
		return err
	}
	return checkExpansion(s)
}

// draft2020 is the one JSON Schema dialect the registry speaks (SPEC 5),
// named with or without TLS and the empty fragment.
var draft2020 = regexp.MustCompile(`^https?://json-schema\.org/draft/2020-12/schema#?$`)

// checkDraft refuses a schema in which any resource declares another
// dialect: the validator would follow its rules (draft-07's items, say), not
// the ones integrators were promised. Values that are data, not schemas
// (const, enum, default, examples), are not searched. Checked at
// registration only, so a version stored before the check still loads.
func checkDraft(raw json.RawMessage) error {
	var doc any
	if json.Unmarshal(raw, &doc) != nil {
		return nil // compile reports it
	}
	var found []Detail
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch v := v.(type) {
		case map[string]any:
			for k, child := range v {
				switch k {
				case "const", "enum", "default", "examples":
					continue
				case "$schema":
					if d, ok := child.(string); ok && !draft2020.MatchString(d) {
						found = append(found, Detail{path + "/$schema",
							"o registro usa JSON Schema 2020-12: omita $schema ou use https://json-schema.org/draft/2020-12/schema"})
					}
					continue
				}
				walk(child, path+"/"+strings.NewReplacer("~", "~0", "/", "~1").Replace(k))
			}
		case []any:
			for i, child := range v {
				walk(child, path+"/"+strconv.Itoa(i))
			}
		}
	}
	walk(doc, "/schema")
	if len(found) == 0 {
		return nil
	}
	slices.SortFunc(found, func(a, b Detail) int { return strings.Compare(a.Caminho, b.Caminho) })
	return &Error{Code: EInvalid, Message: "registro de tipo inválido", Details: found}
}

// schemaURL is where a registered schema sits while it compiles; subschema
// locations start with it.
const schemaURL = "geohub:///schema.json"

func compileSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("JSON inválido: %v", err)
	}
	if _, ok := doc.(map[string]any); !ok {
		if _, isBool := doc.(bool); !isBool {
			return nil, errors.New("deve ser um objeto JSON Schema")
		}
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// Integrators expect "format" (uuid, date-time, email) to be checked, as
	// most validators do, not only annotated as 2020-12 allows.
	c.AssertFormat()
	// Schemas are self-contained: refusing remote $ref keeps registration from
	// reaching the network and keeps validation deterministic.
	c.UseLoader(jsonschema.SchemeURLLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, errors.New(strings.ReplaceAll(err.Error(), schemaURL, ""))
	}
	return s, nil
}

// validatePayload returns the schema's findings on a payload, at most
// MaxDetalhes of them (see checkPayload).
func (c *compiled) validatePayload(doc any) []Detail {
	return c.checkPayload(doc, MaxDetalhes)
}

// checkPayload returns one Detail per failing leaf, located by the JSON
// pointer of the offending value inside the request (under /payload), at
// most room of them (see leafDetails). A payload that would cost the
// validator more than MaxValidationSteps is refused before it runs.
func (c *compiled) checkPayload(doc any, room int) []Detail {
	if steps, at := validationCost(c.schema, doc, MaxValidationSteps); steps > MaxValidationSteps {
		return []Detail{{clip("/payload"+at, maxDetalheCaminho), fmt.Sprintf("validar este payload contra o schema custaria mais de %d passos, "+
			"o limite de uma publicação (cada subschema aplicado a um valor é um passo): envie menos valores", MaxValidationSteps)}}
	}
	err := c.schema.Validate(doc)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []Detail{{"/payload", clip(err.Error(), maxDetalheMensagem)}}
	}
	return leafDetails(ve, room)
}

var schemaPrinter = message.NewPrinter(language.English)

// pointer renders path tokens as an RFC 6901 JSON pointer.
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(t))
	}
	return b.String()
}

func sameContent(a, b TypeVersion) bool {
	ra, _ := json.Marshal(a.Redacao)
	rb, _ := json.Marshal(b.Redacao)
	return a.Audiencia == b.Audiencia && bytes.Equal(canonicalJSON(a.Schema), canonicalJSON(b.Schema)) && bytes.Equal(ra, rb)
}

// canonicalJSON re-encodes a document with sorted keys so that two
// registrations differing only in whitespace or key order compare equal.
func canonicalJSON(raw json.RawMessage) json.RawMessage {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return raw
	}
	out, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return out
}

func semverLess(a, b string) bool {
	var a1, a2, a3, b1, b2, b3 int
	fmt.Sscanf(a, "%d.%d.%d", &a1, &a2, &a3)
	fmt.Sscanf(b, "%d.%d.%d", &b1, &b2, &b3)
	if a1 != b1 {
		return a1 < b1
	}
	if a2 != b2 {
		return a2 < b2
	}
	return a3 < b3
}
