package console

import "net/http"

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	o, err := c.Stats.Overview(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, overviewPage(c.page(r, "Visão geral", "inicio"), o, c.Now()))
}

// overviewCharts is the overview's numbers alone, for its periodic refresh.
func (c *Console) overviewCharts(w http.ResponseWriter, r *http.Request) {
	o, err := c.Stats.Overview(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, overviewCharts(o, c.Now()))
}
