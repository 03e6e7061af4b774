package console

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"

	"geohub/app"
)

var dlqStatusLabel = map[string]string{
	app.DLQPendente:        "Pendente",
	app.DLQRetrying:        "Em nova tentativa",
	app.DLQResolved:        "Resolvida",
	app.DLQFailedPermanent: "Falha permanente",
}

type coloniaCount struct {
	Nome string
	N    int
}

type dlqView struct {
	St       app.DLQStats
	Colonias []coloniaCount // by name
	// Erro is why the last reprocess did not run (the once-a-minute limit).
	Erro string
}

func (c *Console) dlq(w http.ResponseWriter, r *http.Request) {
	c.showDLQ(w, r, http.StatusOK, "")
}

func (c *Console) showDLQ(w http.ResponseWriter, r *http.Request, status int, erro string) {
	st, err := c.Queries.DLQ(r.Context())
	if err != nil {
		c.Fail(w, r, err)
		return
	}
	v := dlqView{St: st, Erro: erro}
	for name, n := range st.PendentesPorColonia {
		v.Colonias = append(v.Colonias, coloniaCount{name, n})
	}
	slices.SortFunc(v.Colonias, func(a, b coloniaCount) int {
		if a.Nome < b.Nome {
			return -1
		}
		if a.Nome > b.Nome {
			return 1
		}
		return 0
	})
	c.render(w, r, status, dlqPage(c.page(r, "Falhas internas", "dlq"), v))
}

func (c *Console) reprocess(w http.ResponseWriter, r *http.Request) {
	colonia := r.PostFormValue("colonia")
	if colonia == "" {
		c.showDLQ(w, r, http.StatusUnprocessableEntity, "Escolha o grupo de consumidores a reprocessar.")
		return
	}
	res, err := c.Consumers.ReprocessDLQ(r.Context(), colonia)
	var e *app.Error
	switch {
	case err == nil:
	case errors.As(err, &e) && e.Code == app.ERateLimited:
		secs := max(1, int(math.Ceil(e.RetryAfter.Seconds())))
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		c.showDLQ(w, r, http.StatusTooManyRequests, fmt.Sprintf(
			"O grupo de consumidores %s foi reprocessado há menos de um minuto, e o reprocessamento é permitido uma vez por minuto por grupo. Tente de novo em %s.",
			colonia, seconds(secs)))
		return
	case errors.As(err, &e) && e.Code.HTTPStatus() < 500:
		c.showDLQ(w, r, e.Code.HTTPStatus(), e.Message+".")
		return
	default:
		c.Fail(w, r, err)
		return
	}
	msg := fmt.Sprintf("Grupo de consumidores %s: nenhuma pendência para reprocessar.", colonia)
	if res.Reprocessados > 0 {
		msg = fmt.Sprintf("Grupo de consumidores %s: %s, %s, %s.", colonia,
			plural(res.Reprocessados, "reprocessada", "reprocessadas"), plural(res.Resolvidos, "resolvida", "resolvidas"),
			plural(res.Falharam, "falhou de novo", "falharam de novo"))
	}
	c.redirect(w, r, "/dlq", msg)
}

func seconds(n int) string {
	if n == 1 {
		return "1 segundo"
	}
	return strconv.Itoa(n) + " segundos"
}
