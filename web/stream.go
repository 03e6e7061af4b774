package web

import (
	"net/http"
	"strconv"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"geohub/app"
)

// Write deadlines (SPEC 10: no slow reader can take the server's memory or
// goroutines).
const (
	// WriteTimeout is how long a non-streaming response may take to be
	// written, from the moment its request was read. A page is at most
	// about two PageBytes, so a reader at 100 KB/s gets it whole with time
	// to spare; one that stops reading is cut here and its goroutine and
	// buffers are freed.
	WriteTimeout = 30 * time.Second
	// StreamWriteWait is how long one piece of a streaming response (replay,
	// audit export) may take: each piece extends the deadline, so a reader
	// that keeps taking streamPiece bytes per StreamWriteWait keeps its
	// stream, however long, and one that stops is cut.
	StreamWriteWait = 30 * time.Second
	streamPiece     = 32 << 10
)

// writeDeadline gives every response the WriteTimeout deadline; streaming
// handlers move it forward themselves (streamWriter), and websockets clear
// it at the upgrade and set their own per message.
func writeDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(WriteTimeout))
		next.ServeHTTP(w, r)
	})
}

// streamWriter writes a streaming response in pieces of at most
// streamPiece bytes, each under a fresh StreamWriteWait deadline: a single
// MiB record then needs a reader that moves, not one fast enough to take
// a MiB within one deadline.
type streamWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newStreamWriter(w http.ResponseWriter) *streamWriter {
	return &streamWriter{w: w, rc: http.NewResponseController(w)}
}

func (s *streamWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), streamPiece)
		s.rc.SetWriteDeadline(time.Now().Add(StreamWriteWait))
		m, err := s.w.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// Flush sends what is buffered, under a fresh deadline.
func (s *streamWriter) Flush() error {
	s.rc.SetWriteDeadline(time.Now().Add(StreamWriteWait))
	return s.rc.Flush()
}

// writeEventPage writes p in the shape writeJSON gives an app.Page[Event],
// encoding each record as the store yields it: the page is never whole in
// memory, only the chunk being read and a 32 KiB buffer (or the one record
// that is larger).
func (s *Server) writeEventPage(w http.ResponseWriter, r *http.Request, p *app.EventPage) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	buf := append(make([]byte, 0, 32<<10), `{"linhas":[`...)
	n := 0
	for ev, err := range p.Rows {
		if err != nil {
			// The status is gone: break the connection, so that the client
			// sees a failed response rather than a short page.
			s.Logger.Error("event page interrupted", "method", r.Method, "path", r.URL.Path, "err", err)
			panic(http.ErrAbortHandler)
		}
		if n > 0 {
			buf = append(buf, ',')
		}
		buf = ev.AppendJSON(buf)
		n++
		if len(buf) >= 32<<10 {
			if _, err := w.Write(buf); err != nil {
				return // the deadline or the client ended it
			}
			buf = buf[:0]
		}
	}
	buf = append(buf, `],"total":`...)
	buf = strconv.AppendInt(buf, int64(p.Total), 10)
	buf = append(buf, `,"limite":`...)
	buf = strconv.AppendInt(buf, int64(p.Limite), 10)
	buf = append(buf, `,"deslocamento":`...)
	buf = strconv.AppendInt(buf, int64(p.Deslocamento), 10)
	if p.Proximo != "" {
		buf = append(buf, `,"proximo":`...)
		buf, _ = jsontext.AppendQuote(buf, p.Proximo)
	}
	if p.TruncadaPorTamanho {
		buf = append(buf, `,"truncada_por_tamanho":true`...)
	}
	w.Write(append(buf, "}\n"...))
}
