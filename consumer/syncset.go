package consumer

import "sync"

// maxSyncTenants is the most tenants a Sync names; a consumer that
// finished records of more since its last Sync asks the pusher to sync
// every tenant, which costs the pusher no more than that many and keeps
// the request small.
const maxSyncTenants = 10_000

// syncSet is the tenants whose records were finished since the last Sync
// began: what the next Sync must make durable. A pusher serves several
// consumers, and a Sync that names its caller's tenants spares it the
// others' files (SyncRequest.tenants).
//
// A tenant is added before its record's offset can be committed (finish
// adds it before the tracker sees the record done), and the committer
// takes the set after it read the watermarks, so every record a commit
// covers has its tenant in the Sync before that commit.
type syncSet struct {
	mu sync.Mutex
	m  map[string]struct{}
	// all is set when the next Sync must cover every tenant: the set grew
	// past maxSyncTenants, or a Sync for every tenant failed.
	all bool
}

// add notes that a record of tenant was finished.
func (s *syncSet) add(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.all {
		return
	}
	if _, ok := s.m[tenant]; ok {
		return
	}
	if len(s.m) >= maxSyncTenants {
		s.all, s.m = true, nil
		return
	}
	if s.m == nil {
		s.m = make(map[string]struct{})
	}
	s.m[tenant] = struct{}{}
}

// take empties the set and returns the tenants for a Sync to name; nil
// asks for every tenant (so does a Sync with nothing added since the last:
// rare, and never wrong). A nil set always returns nil.
func (s *syncSet) take() []string {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.all || len(s.m) == 0 {
		s.all, s.m = false, nil
		return nil
	}
	out := make([]string, 0, len(s.m))
	for t := range s.m {
		out = append(out, t)
	}
	clear(s.m)
	return out
}

// putBack returns what take gave to a Sync that failed: the next Sync must
// cover it again.
func (s *syncSet) putBack(tenants []string) {
	if s == nil {
		return
	}
	if tenants == nil {
		s.mu.Lock()
		s.all, s.m = true, nil
		s.mu.Unlock()
		return
	}
	for _, t := range tenants {
		s.add(t)
	}
}
