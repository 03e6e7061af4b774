package receiver

import "sync"

// MemorySeen is the default [SeenStore]: the last n envelope ids, in memory.
// The oldest id is forgotten first; a repeat that old is still caught by its
// sequence when it has one.
type MemorySeen struct {
	mu   sync.Mutex
	ids  map[string]struct{}
	ring []string
	pos  int
}

// NewMemorySeen returns a MemorySeen that remembers n ids (at least 1).
func NewMemorySeen(n int) *MemorySeen {
	n = max(n, 1)
	return &MemorySeen{ids: make(map[string]struct{}, n), ring: make([]string, 0, n)}
}

// Seen reports whether id was marked and not yet forgotten.
func (s *MemorySeen) Seen(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ids[id]
	return ok
}

// Mark remembers id, forgetting the oldest one when full.
func (s *MemorySeen) Mark(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.ids[id]; ok {
		return
	}
	if len(s.ring) < cap(s.ring) {
		s.ring = append(s.ring, id)
	} else {
		delete(s.ids, s.ring[s.pos])
		s.ring[s.pos] = id
		s.pos = (s.pos + 1) % len(s.ring)
	}
	s.ids[id] = struct{}{}
}

// memorySequences is the default [SequenceStore]. It grows with the
// aggregates seen; a CAD that must bound it or survive a restart brings its
// own.
type memorySequences struct {
	mu   sync.Mutex
	next map[string]int64
}

func (m *memorySequences) Next(agregado string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n, ok := m.next[agregado]; ok {
		return n
	}
	return 1
}

func (m *memorySequences) SetNext(agregado string, next int64) {
	m.mu.Lock()
	m.next[agregado] = next
	m.mu.Unlock()
}
