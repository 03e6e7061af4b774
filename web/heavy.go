package web

import "net/http"

// heavy runs h inside one of the caller's slots (package heavy).
func (s *Server) heavy(h http.HandlerFunc) http.HandlerFunc { return s.Heavy.Wrap(h, s.Fail) }
