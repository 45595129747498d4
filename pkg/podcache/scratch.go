package podcache

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// Scratch materialises cached pods into memory it reuses from one call to the next: a pod
// struct, its label and annotation maps, its container statuses and its claim volumes per pod.
// It is for a computation that keeps nothing of the materialised pods but their strings and the
// cache's own slices (workspace.Describe, the proxy's routes): Materialize makes a 1,240-byte
// pod struct, two maps and slices per pod, garbage as soon as the computation returns, and the
// views and the routes each materialised every pod of the initial list at start-up, on the cold
// start's path (bench/history.md, "Twelfth round: cold start").
//
// A Scratch is not safe for concurrent use: take one from GetScratch and give it back with
// Release.
type Scratch struct {
	pods []corev1.Pod
	ptrs []*corev1.Pod
	use  []reused
}

// Materialize returns cached as Pod.Materialize returns each pod, in the same order, in s's
// memory: the pods, their maps and their container statuses and volumes are valid only until
// the next Materialize or Release of s, and are read only (their other slices are the cache's).
func (s *Scratch) Materialize(cached []*Pod) []*corev1.Pod {
	if n := len(cached); len(s.pods) < n {
		s.pods = append(s.pods, make([]corev1.Pod, n-len(s.pods))...)
		s.use = append(s.use, make([]reused, n-len(s.use))...)
	}
	s.ptrs = s.ptrs[:0]
	for i, p := range cached {
		p.materializeReusing(&s.pods[i], &s.use[i])
		s.ptrs = append(s.ptrs, &s.pods[i])
	}
	return s.ptrs
}

// scratches holds the Scratches GetScratch hands out.
var scratches = sync.Pool{New: func() any { return new(Scratch) }}

// GetScratch returns a Scratch for one computation; give it back with Release.
func GetScratch() *Scratch { return scratches.Get().(*Scratch) }

// maxScratchPods is the most pods a Scratch given back keeps room for: a workspace has one pod,
// two during an upgrade; one with many (pods piling up) lets the collector take its memory.
const maxScratchPods = 8

// Release gives s back for reuse: the pods it materialised must not be read after it. What it
// keeps points into the cache no more (cleared), so a pooled Scratch holds no deleted pod.
func (s *Scratch) Release() {
	if len(s.pods) > maxScratchPods {
		return
	}
	clear(s.pods)
	clear(s.ptrs[:cap(s.ptrs)])
	for i := range s.use {
		u := &s.use[i]
		clear(u.labels)
		clear(u.annotations)
		clear(u.containers[:cap(u.containers)])
		clear(u.volumes[:cap(u.volumes)])
		clear(u.claims[:cap(u.claims)])
	}
	scratches.Put(s)
}
