package podcache

import (
	"runtime"
	"slices"
	"sync"
	"unique"
	"weak"
)

// keySet is the sorted label keys and the sorted annotation keys of a cached pod, interned: the
// pods of a template (the same labels and annotations, different values) share one keySet, and a
// pod holds only its values (Pod.vals, in the keySet's order). A keySet is never written after it
// is made.
//
// A map per pod cost a header and a full group of 8 slots whatever it held: about 670 bytes for
// a workspace pod's two maps at 10,000 workspaces; the shared keys and a pod's own values are 8
// bytes of pointer plus 16 bytes per value (bench/history.md, "Tenth round").
type keySet struct {
	labels, annotations []string
	// handles hold the keys' entries in the unique package's table while the keySet lives: the
	// table holds its entries weakly, by the handle, not by the string, so without them a key
	// set's keys could outlive their entries, and a pod of another key set made later got fresh
	// copies of the same keys (TestTransformDropsWhatNobodyReads failed in 6-18 of 20 runs).
	handles []unique.Handle[string]
}

// keySets interns keySets by their keys, weakly: a keySet no pod uses any more is collected and
// its entry removed (runtime.AddCleanup), as the unique package does for interned strings. id is
// a buffer for the keys' spelling, reused under the lock: a transform of a pod whose keys are
// interned already allocates nothing here.
var keySets = struct {
	sync.Mutex
	m  map[string]weak.Pointer[keySet]
	id []byte
}{m: map[string]weak.Pointer[keySet]{}}

// internKeys returns the interned keySet of the sorted, interned keys labels and annotations
// (which it copies when it makes a new keySet).
func internKeys(labels, annotations []string) *keySet {
	if len(labels) == 0 && len(annotations) == 0 {
		return nil
	}
	keySets.Lock()
	defer keySets.Unlock()
	id := keySets.id[:0]
	for _, k := range labels {
		id = append(append(id, k...), 0) // no key holds a NUL: an API server refuses it
	}
	id = append(id, 1)
	for _, k := range annotations {
		id = append(append(id, k...), 0)
	}
	keySets.id = id
	if ks := keySets.m[string(id)].Value(); ks != nil {
		return ks
	}
	// The key set's strings are its handles' own: a string interned before and collected since
	// would otherwise stay a private copy here while later key sets share the handle's.
	ks := &keySet{labels: make([]string, len(labels)), annotations: make([]string, len(annotations)),
		handles: make([]unique.Handle[string], 0, len(labels)+len(annotations))}
	for i, k := range labels {
		h := unique.Make(k)
		ks.handles = append(ks.handles, h)
		ks.labels[i] = h.Value()
	}
	for i, k := range annotations {
		h := unique.Make(k)
		ks.handles = append(ks.handles, h)
		ks.annotations[i] = h.Value()
	}
	sid := string(id)
	keySets.m[sid] = weak.Make(ks)
	runtime.AddCleanup(ks, forgetKeys, sid)
	return ks
}

// forgetKeys removes the entry of a collected keySet, unless a new keySet of the same keys took
// its place meanwhile.
func forgetKeys(id string) {
	keySets.Lock()
	defer keySets.Unlock()
	if keySets.m[id].Value() == nil {
		delete(keySets.m, id)
	}
}

// setMeta stores labels and annotations in p: keys interned (every key, in a shared keySet), the
// values of the keys in sharedLabels and sharedAnnotations interned, the others kept as they are.
func (p *Pod) setMeta(labels, annotations map[string]string) {
	if len(labels)+len(annotations) == 0 {
		p.keys, p.vals = nil, nil
		return
	}
	var buf [32]string // the keys of most pods, sorted here without an allocation
	keys := buf[:0]
	for k := range labels {
		keys = append(keys, k)
	}
	nl := len(keys)
	for k := range annotations {
		keys = append(keys, k)
	}
	lk, ak := keys[:nl:nl], keys[nl:]
	slices.Sort(lk)
	slices.Sort(ak)
	vals := make([]string, 0, len(keys))
	add := func(ks []string, m map[string]string, internedValues map[string]bool) {
		for i, k := range ks {
			v := m[k]
			if internedValues[k] {
				v = intern(v)
			}
			ks[i] = intern(k)
			vals = append(vals, v)
		}
	}
	add(lk, labels, internedLabelValues)
	add(ak, annotations, internedAnnotationValues)
	p.keys, p.vals = internKeys(lk, ak), vals
}

// lookup finds key among keys (sorted) and returns its value among vals: by comparing each key
// for a few (a string == compares lengths first: most keys differ there), by a binary search
// for more.
func lookup(keys, vals []string, key string) (string, bool) {
	if len(keys) <= 8 {
		for i, k := range keys {
			if k == key {
				return vals[i], true
			}
		}
		return "", false
	}
	if i, ok := slices.BinarySearch(keys, key); ok {
		return vals[i], true
	}
	return "", false
}

func (p *Pod) labelKeys() []string {
	if p.keys == nil {
		return nil
	}
	return p.keys.labels
}

func (p *Pod) annotationKeys() []string {
	if p.keys == nil {
		return nil
	}
	return p.keys.annotations
}

// LookupLabel returns the value of the label key and whether the pod has it. It builds no map.
func (p *Pod) LookupLabel(key string) (string, bool) {
	return lookup(p.labelKeys(), p.vals, key)
}

// Label returns the value of the label key, "" when the pod has none. It builds no map.
func (p *Pod) Label(key string) string {
	v, _ := p.LookupLabel(key)
	return v
}

// LookupAnnotation returns the value of the annotation key and whether the pod has it. It builds
// no map.
func (p *Pod) LookupAnnotation(key string) (string, bool) {
	return lookup(p.annotationKeys(), p.vals[len(p.labelKeys()):], key)
}

// Annotation returns the value of the annotation key, "" when the pod has none. It builds no map.
func (p *Pod) Annotation(key string) string {
	v, _ := p.LookupAnnotation(key)
	return v
}

// Labels is the pod's labels for a label selector (labels.Labels: Has, Get, Lookup), without a
// map.
func (p *Pod) Labels() PodLabels { return PodLabels{p} }

// PodLabels is a cached pod's labels as labels.Labels.
type PodLabels struct{ p *Pod }

// Has implements labels.Labels.
func (l PodLabels) Has(key string) bool { _, ok := l.p.LookupLabel(key); return ok }

// Get implements labels.Labels.
func (l PodLabels) Get(key string) string { return l.p.Label(key) }

// Lookup implements labels.Labels.
func (l PodLabels) Lookup(key string) (string, bool) { return l.p.LookupLabel(key) }

// labelMap and annotationMap build the pod's labels or annotations as a map of their exact size
// (nil for none), into m when m is not nil (cleared first).
func (p *Pod) labelMap(m map[string]string) map[string]string {
	return toMap(m, p.labelKeys(), p.vals)
}

func (p *Pod) annotationMap(m map[string]string) map[string]string {
	return toMap(m, p.annotationKeys(), p.vals[len(p.labelKeys()):])
}

func toMap(m map[string]string, keys, vals []string) map[string]string {
	if len(keys) == 0 {
		return nil
	}
	if m == nil {
		m = make(map[string]string, len(keys))
	} else {
		clear(m)
	}
	for i, k := range keys {
		m[k] = vals[i]
	}
	return m
}
