package ui

import "sync"

// slots bounds how many of something each subject holds at once: the live list streams of one
// user. A stream takes a slot when it opens and gives it back when it ends.
type slots struct {
	max int

	mu   sync.Mutex
	held map[string]int
	// freed is closed (and replaced) whenever a slot is given back, for whoever waits for one.
	freed chan struct{}
}

func newSlots(max int) *slots {
	return &slots{max: max, held: map[string]int{}, freed: make(chan struct{})}
}

// take takes one of subject's slots; false when subject holds them all.
func (s *slots) take(subject string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[subject] >= s.max {
		return false
	}
	s.held[subject]++
	return true
}

// give gives back one of subject's slots.
func (s *slots) give(subject string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[subject]--; s.held[subject] <= 0 {
		delete(s.held, subject)
	}
	close(s.freed)
	s.freed = make(chan struct{})
}

// holding returns how many slots subject holds, and a channel closed when one is next given back.
func (s *slots) holding(subject string) (int, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[subject], s.freed
}
