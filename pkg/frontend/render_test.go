package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"

	"github.com/nogoo9/no-crd/pkg/auth"
	"github.com/nogoo9/no-crd/pkg/podcache"
	"github.com/nogoo9/no-crd/pkg/workspace"
)

// TestCompactWritesWhatJSONWrites splits the JSON of 2,000 random views, every member set or
// empty at random, with strings that look like JSON members, escapes, quotes, HTML and non-ASCII
// text, and checks that the compact form writes back exactly json.Marshal's bytes, or is nil only
// where it must be (a run of the workspace's own over 64 KiB), and its escaped form exactly
// those bytes escaped (AppendEscaped), with and without a clock note, from values kept escaped
// or, where escaped they outgrow the ends (a name of 20,000 quotes), escaped at each write.
func TestCompactWritesWhatJSONWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 7))
	nasty := []string{
		"", "plain", `","namespace":"evil`, `{"id":"x"}`, `back\slash`, `quote"d`, "tab\there", "<b>&amp;</b>",
		"ünïcödé ✓", "\u2028line\u2029", "null", "true", "12", ",", ":", "}", `\"`, "\x01\x1f", "\xff", `\u0000`,
	}
	str := func() string {
		if rng.IntN(3) == 0 {
			return ""
		}
		return nasty[rng.IntN(len(nasty))] + fmt.Sprint(rng.IntN(1000))
	}
	for i := range 2000 {
		w := workspace.Info{
			Namespace: str(), ID: str(), Name: str(), Owner: str(), UserLabel: str(), Template: str(),
			TemplateNamespace: str(), TemplateVersion: str(), LatestTemplateVersion: str(), IsOutdated: rng.IntN(2) == 0,
			Status:    workspace.Status{Phase: workspace.PhaseName(str()), Reason: str(), Message: str()},
			ActivePod: str(), WorkspacePath: str(), PreviewPath: str(), LastUpgradeError: str(), UpgradePod: str(),
			Maintenance: str(), CreatedAt: t0.Add(time.Duration(rng.IntN(1e6)) * time.Second), LastActivity: str(),
			Pinned: rng.IntN(2) == 0, UpdatePolicy: str(), UpdateWindow: str(),
		}
		if i%500 == 0 {
			w.Message = strings.Repeat("m", 70000)
		}
		// Compact, but its first run escaped no longer fits the ends: escaped at every write.
		tooLong := i%500 == 250
		if tooLong {
			w.Name = strings.Repeat(`"`, 20000)
		}
		b, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		enc := encode(b)
		if whole := enc.shape.Value().holes == 1 && enc.vals == string(b); whole != (i%500 == 0) {
			t.Fatalf("view %d kept whole: %v, want %v (a 70,000-byte message and only then)", i, whole, i%500 == 0)
		}
		if got := enc.appendTo(nil, nil); !bytes.Equal(got, b) {
			t.Fatalf("view %d:\n%s\nwant\n%s", i, got, b)
		}
		for range 2 { // the second from the values kept escaped, or from the mark that they are not
			if got, want := enc.appendEscapedTo(nil, nil), AppendEscaped(nil, b); !bytes.Equal(got, want) {
				t.Fatalf("view %d escaped:\n%s\nwant\n%s", i, got, want)
			}
		}
		if kept := enc.escaped() != nil; kept == tooLong {
			t.Fatalf("view %d keeps its values escaped: %v, want %v", i, kept, !tooLong)
		}

		// With a clock note, as encoding builds it: the note's place marked in the message,
		// the note's text put there when the list is written.
		if w.Message == "" {
			continue // probeClock gives an empty message no note
		}
		note := str() + "(for 3m)"
		w.Message += noteMark
		marked, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Count(marked, noteMarkJSON) != 1 {
			continue // encoding describes such a view at read time
		}
		k := bytes.Index(marked, noteMarkJSON)
		marked = append(append(marked[:k:k], noteByte), marked[k+len(noteMarkJSON):]...)
		w.Message = strings.TrimSuffix(w.Message, noteMark) + note
		want, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		if got := encode(marked).appendTo(nil, jsonStringContent(note)); !bytes.Equal(got, want) {
			t.Fatalf("view %d with note %q:\n%s\nwant\n%s", i, note, got, want)
		}
		if got, want := encode(marked).appendEscapedTo(nil, AppendEscaped(nil, jsonStringContent(note))), AppendEscaped(nil, want); !bytes.Equal(got, want) {
			t.Fatalf("view %d with note %q, escaped:\n%s\nwant\n%s", i, note, got, want)
		}
	}
}

// TestCachedJSONHoldsOnlyWhatIsTheWorkspacesOwn checks that the REST list's cached JSON of 10,000
// ready workspaces of one template shares one shape (the keys and the shared values) and holds
// well under the 417 bytes per workspace that a whole cached JSON object took (measured exactly:
// heap allocated after two collections; about 240 bytes compact).
func TestCachedJSONHoldsOnlyWhatIsTheWorkspacesOwn(t *testing.T) {
	const n = 10000
	entries := make([]*entry, n)
	for i := range entries {
		owner, id := fmt.Sprintf("user-%d", i%100), fmt.Sprintf("ws-%d", i)
		entries[i] = newEntry([]*corev1.Pod{pod(workspace.PodName(owner, id), owner, id, "1.0", t0.Add(time.Duration(i)*time.Second), ready)})
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	for _, e := range entries {
		if e.encoding("1.0") == nil {
			t.Fatalf("workspace %s encoded at read time", e.id)
		}
	}
	perWorkspace := float64(heap()-before) / n
	runtime.KeepAlive(entries)
	t.Logf("cached JSON: %.0f bytes per workspace", perWorkspace)
	if perWorkspace > 320 {
		t.Errorf("cached JSON takes %.0f bytes per workspace, want at most 320", perWorkspace)
	}
	first := entries[0].enc.Load()
	for _, e := range entries {
		enc := e.enc.Load()
		if enc.shape != first.shape {
			t.Fatalf("workspace %s has its own shape %q, want the one all share %q", e.id, enc.shape.Value().lits, first.shape.Value().lits)
		}
		for _, shared := range []string{`"namespace"`, `"templateVersion"`, `"phase"`, `"python"`} {
			if strings.Contains(enc.vals, shared) {
				t.Fatalf("workspace %s holds %s itself: %q", e.id, shared, enc.vals)
			}
		}
	}
}

// TestEntryFitsItsSizeClass keeps a view's entry at 96 bytes, the size class it is allocated in
// (112 with the clock note's time as a time.Time).
func TestEntryFitsItsSizeClass(t *testing.T) {
	if got := unsafe.Sizeof(entry{}); got > 96 {
		t.Errorf("entry is %d bytes, want at most 96 (one per workspace)", got)
	}
}

// TestFirstListEncodesEveryViewInParallelAsOneByOne: a list of more than parallelEncodings views
// of every clock kind (ready, pending with the clock note, being deleted with the grace note,
// pulling, upgrading, two pods), none encoded yet, is encoded on several goroutines before it is
// written (encodeMissing: every view but the clock-opaque ones has its encoding for its latest
// version afterwards, whatever part of the list it is in), and the JSON written is what
// json.Marshal of its values gives, as when the same views are encoded one by one. Run with
// -race, it also checks that the encodings are made concurrently without a race.
func TestFirstListEncodesEveryViewInParallelAsOneByOne(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	now := t0.Add(time.Hour)
	newService := func() *Service {
		svc, err := New(Config{Namespace: "ns", Templates: stubTemplates{"python": "2.0"}, Now: func() time.Time { return now }, Pods: syncedInformer{}})
		if err != nil {
			t.Fatal(err)
		}
		const n = 3*parallelEncodings + 7
		for i := range n {
			owner, id := fmt.Sprintf("user-%d", i%37), fmt.Sprintf("ws-%05d", i)
			name := workspace.PodName(owner, id)
			created := t0.Add(time.Duration(i%90) * time.Second)
			var pods []*corev1.Pod
			switch i % 6 {
			case 0:
				pods = []*corev1.Pod{pod(name, owner, id, "1.0", created, ready)}
			case 1:
				pods = []*corev1.Pod{pod(name, owner, id, "2.0", created)}
			case 2:
				pods = []*corev1.Pod{pod(name, owner, id, "1.0", created, ready, deletedAt(created.Add(time.Minute)))}
			case 3:
				pods = []*corev1.Pod{pod(name, owner, id, "2.0", created, pulling)}
			case 4:
				pods = []*corev1.Pod{pod(name, owner, id, "1.0", created, ready, annotated(workspace.AnnUpgradeRequested, "2026-03-01T10:00:00Z", workspace.AnnUpgradePod, name+"-up"))}
			case 5:
				pods = []*corev1.Pod{pod(name, owner, id, "1.0", created, ready), pod(name+"-up", owner, id, "2.0", created.Add(time.Second))}
			}
			for _, p := range pods {
				svc.views.OnAdd(podcache.Of(p), true)
			}
		}
		return svc
	}
	ctx := auth.WithCaller(context.Background(), &auth.Caller{Subject: "root", IsAdmin: true})
	list := func(svc *Service) *WorkspaceList {
		l, err := svc.List(ctx, ListOptions{AllUsers: true})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	parallel := list(newService())
	parallel.encodeMissing()
	opaque := 0
	for i, e := range parallel.entries {
		if e.clock.kind == clockOpaque {
			opaque++
			continue
		}
		if enc := e.enc.Load(); enc == nil || enc.latest != parallel.latest[e.template] {
			t.Fatalf("view %d of %d (%s) has no encoding after encodeMissing", i, len(parallel.entries), e.id)
		}
	}
	if opaque == len(parallel.entries) {
		t.Fatal("every view is clock-opaque: nothing was encoded")
	}
	var got bytes.Buffer
	if err := parallel.WriteJSON(&got); err != nil {
		t.Fatal(err)
	}

	serial := list(newService())
	var want bytes.Buffer
	want.WriteByte('[')
	for i, e := range serial.entries { // one by one, in order, as the list is written
		if i > 0 {
			want.WriteByte(',')
		}
		want.Write(serial.appendEntry(nil, e, map[clockNote][]byte{}, false))
	}
	want.WriteByte(']')
	if got.String() != want.String() {
		t.Fatalf("the list encoded in parallel differs from the one encoded one by one:\n got %.300s\nwant %.300s", got.String(), want.String())
	}
	values, err := json.Marshal(serial.Workspaces())
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(values) {
		t.Fatalf("the list encoded in parallel is not json.Marshal of its values:\n got %.300s\nwant %.300s", got.String(), values)
	}
}
