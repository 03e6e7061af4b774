package ocorrencia

import "slices"

// The console offers only the moves the state machines allow, read from the
// same tables the commands check, so a page cannot offer what a command
// would refuse for its status (a command may still refuse for another
// reason, such as closing with despachos active, and says why).

// NextStatuses are the statuses the ocorrência may move to from its own.
func (o Ocorrencia) NextStatuses() []string { return slices.Clone(ocorrenciaNext[o.Status]) }

// AcceptsDispatch says whether a resource may still be sent to it.
func (o Ocorrencia) AcceptsDispatch() bool { return o.ID != "" && o.Status != Encerrada }

// Active lists the despachos still on their way or on site: those keep the
// ocorrência from being closed.
func (o Ocorrencia) Active() []Despacho {
	var out []Despacho
	for _, d := range o.Despachos {
		if d.active() {
			out = append(out, d)
		}
	}
	return out
}

// NextStatuses are the statuses the despacho may move to from its own.
func (d Despacho) NextStatuses() []string { return slices.Clone(despachoNext[d.Status]) }
