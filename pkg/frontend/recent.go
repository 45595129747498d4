package frontend

import (
	"sync"
	"time"
)

// recentSpawnTTL is how long a replica remembers a workspace it spawned: far longer than its
// cache takes to show the pod (milliseconds, seconds under load).
const recentSpawnTTL = 30 * time.Second

// maxRecentSpawns bounds the memory; when full, the expired entries go first, then any.
const maxRecentSpawns = 4096

// recentSpawns are the workspaces this replica spawned a moment ago, by namespace and id, with
// their owner. A caller that spawns and at once asks for the workspace (an agent's get_workspace,
// a stop, a delete) reads this replica's cache, which may not show the pod yet: the workspace
// would be answered 404, and an agent could take it for gone and leave it running. A workspace
// remembered here that the cache does not show is read from the API server instead. Another
// replica's cache catches up alone; a request there may still see 404 for that moment.
//
// An entry is forgotten as soon as it has served its purpose, so that its owner cannot make
// every request for the id a List straight to the API server: once the cache shows the
// workspace, and once a read from the API server finds none (it is gone already).
type recentSpawns struct {
	mu sync.Mutex
	m  map[string]recentSpawn
}

type recentSpawn struct {
	owner string
	at    time.Time
}

func (r *recentSpawns) add(ns, id, owner string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]recentSpawn{}
	}
	if len(r.m) >= maxRecentSpawns {
		for k, e := range r.m {
			if now.Sub(e.at) > recentSpawnTTL {
				delete(r.m, k)
			}
		}
		for k := range r.m {
			if len(r.m) < maxRecentSpawns {
				break
			}
			delete(r.m, k)
		}
	}
	r.m[ns+"/"+id] = recentSpawn{owner: owner, at: now}
}

// forget drops the entry of ns/id, if any.
func (r *recentSpawns) forget(ns, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.m) > 0 {
		delete(r.m, ns+"/"+id)
	}
}

// owner is the owner of the workspace spawned here within recentSpawnTTL, or false.
func (r *recentSpawns) owner(ns, id string, now time.Time) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[ns+"/"+id]
	if !ok || now.Sub(e.at) > recentSpawnTTL {
		return "", false
	}
	return e.owner, true
}
