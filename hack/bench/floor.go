package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nogoo9/no-crd/pkg/workspace"
)

const labelSlot = "bench.nogoo9/slot"

// Floor is the least any controller could do: a bare client, no controller, that creates each
// replacement pod and deletes the old pod as soon as its replacement is Ready (side by side), or
// deletes the old pod and creates the new one once it is gone (Recreate, with a ReadWriteOncePod
// claim per slot). Its client should have the same QPS as nogoo9's.
//
// With Intent it is the floor of a design that records each request on the object first ("floor +
// intent"): before its first request for a slot (the create side by side, the delete for
// Recreate) it merge-patches the same two annotations onto the old pod that nogoo9's upgrade-all
// writes (IntentPatch), in the same worker, with no watch hop between. The difference between it
// and the plain floor is what the intent the design requires costs the cluster; the rest of
// nogoo9's gap is nogoo9's.
type Floor struct {
	Client    kubernetes.Interface
	Namespace string
	N         int
	Recreate  bool
	Intent    bool
	// Workers is the number of parallel request goroutines (default 32).
	Workers int
	// Timeline is the last Roll's milestones per slot (see Timeline).
	Timeline *Timeline
	rev      int
}

func (f *Floor) podName(i, rev int) string { return fmt.Sprintf("f-%d-r%d", i, rev) }
func (f *Floor) claimName(i int) string    { return fmt.Sprintf("f-%d", i) }

func (f *Floor) pod(i, rev int) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: f.podName(i, rev), Namespace: f.Namespace,
			Labels: map[string]string{labelSlot: strconv.Itoa(i), LabelRev: strconv.Itoa(rev)}},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{benchContainer(rev)},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		},
	}
	if f.Recreate {
		p.Spec.Volumes = []corev1.Volume{{Name: "home", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: f.claimName(i)}}}}
	}
	return p
}

func (f *Floor) workers() int {
	if f.Workers > 0 {
		return f.Workers
	}
	return 32
}

func (f *Floor) create(ctx context.Context, i, rev int) error {
	_, err := f.Client.CoreV1().Pods(f.Namespace).Create(ctx, f.pod(i, rev), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create pod %s/%s: %w", f.Namespace, f.podName(i, rev), err)
	}
	return nil
}

// IntentPatch is the merge patch nogoo9's upgrade-all writes on a workspace's pod (pkg/frontend:
// the request's time and the upgraded pod's name), for the "floor + intent" baseline.
func IntentPatch(now time.Time, podName string) []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		workspace.AnnUpgradeRequested: now.UTC().Format(time.RFC3339),
		workspace.AnnUpgradePod:       podName,
	}}})
	return b
}

// intent writes the intent on slot i's pod of revision old, naming its replacement of revision next.
func (f *Floor) intent(ctx context.Context, i, old, next int) error {
	name := f.podName(i, old)
	_, err := f.Client.CoreV1().Pods(f.Namespace).Patch(ctx, name, types.MergePatchType, IntentPatch(time.Now(), f.podName(i, next)), metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patch intent on pod %s/%s: %w", f.Namespace, name, err)
	}
	return nil
}

func (f *Floor) delete(ctx context.Context, p *corev1.Pod) error {
	err := f.Client.CoreV1().Pods(f.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &p.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s/%s: %w", f.Namespace, p.Name, err)
	}
	return nil
}

// Setup creates the first generation of pods (and claims for Recreate) and waits until all are
// Ready.
func (f *Floor) Setup(ctx context.Context) error {
	if err := ensureNamespace(ctx, f.Client, f.Namespace); err != nil {
		return err
	}
	if f.Recreate {
		if err := createRWOPClaims(ctx, f.Client, f.Namespace, "bench-rwop-"+f.Namespace, f.N, f.claimName); err != nil {
			return err
		}
	}
	if err := parallel(ctx, f.N, f.workers(), func(ctx context.Context, i int) error { return f.create(ctx, i, 0) }); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	w, err := watchPods(ctx, f.Client, f.Namespace, "")
	if err != nil {
		return err
	}
	defer w.close()
	return w.wait(ctx, fmt.Sprintf("%d floor pods Ready", f.N), func(pods []*corev1.Pod) bool { return allAtRevision(pods, f.N, "0") })
}

// Roll replaces every pod with one of the next revision and returns the time until all new pods
// are Ready and no old pod is left.
func (f *Floor) Roll(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w, err := watchPods(ctx, f.Client, f.Namespace, "")
	if err != nil {
		return 0, err
	}
	defer w.close()
	old, next := f.rev, f.rev+1
	want := strconv.Itoa(next)

	// requests are issued by a pool of workers; the decision of what to send is made from the
	// watch, each slot's step at most once.
	type job struct {
		create int
		del    *corev1.Pod
		// intent: write the intent on the slot's old pod first (Intent; the slot's first request).
		intent bool
	}
	jobs := make(chan job, f.N*2)
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	for k := 0; k < f.workers(); k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				var err error
				if j.intent {
					slot := j.create
					if j.del != nil {
						slot, _ = strconv.Atoi(j.del.Labels[labelSlot])
					}
					if err = f.intent(ctx, slot, old, next); err != nil {
						select {
						case errc <- err:
						default:
						}
						cancel()
						continue
					}
				}
				if j.del != nil {
					err = f.delete(ctx, j.del)
				} else {
					err = f.create(ctx, j.create, next)
				}
				if err != nil {
					select {
					case errc <- err:
					default:
					}
					cancel()
				}
			}
		}()
	}
	defer func() { close(jobs); wg.Wait() }()

	start := time.Now()
	tl := NewTimeline(start, "intent", "old deleting", "old gone", "created", "scheduled", "Ready")
	f.Timeline = tl
	created := make([]bool, f.N)
	deleted := make([]bool, f.N)
	if !f.Recreate {
		for i := 0; i < f.N; i++ {
			jobs <- job{create: i, intent: f.Intent}
			created[i] = true
		}
	}
	oldRev := strconv.Itoa(old)
	err = w.wait(ctx, fmt.Sprintf("%d floor pods replaced", f.N), func(pods []*corev1.Pod) bool {
		oldPods := make([]*corev1.Pod, f.N)
		newReady := make([]bool, f.N)
		now := time.Now()
		for _, p := range pods {
			i, err := strconv.Atoi(p.Labels[labelSlot])
			if err != nil || i < 0 || i >= f.N {
				continue
			}
			switch p.Labels[LabelRev] {
			case oldRev:
				oldPods[i] = p
				if p.Annotations[workspace.AnnUpgradeRequested] != "" {
					tl.Mark("intent", strconv.Itoa(i), now)
				}
				if p.DeletionTimestamp != nil {
					tl.Mark("old deleting", strconv.Itoa(i), now)
				}
			case want:
				newReady[i] = podReady(p)
				tl.Mark("created", strconv.Itoa(i), now)
				if p.Spec.NodeName != "" {
					tl.Mark("scheduled", strconv.Itoa(i), now)
				}
				if newReady[i] {
					tl.Mark("Ready", strconv.Itoa(i), now)
				}
			}
		}
		for i := 0; i < f.N; i++ {
			if oldPods[i] == nil {
				tl.Mark("old gone", strconv.Itoa(i), now)
			}
			switch {
			case f.Recreate && oldPods[i] != nil && !deleted[i]:
				jobs <- job{del: oldPods[i], intent: f.Intent}
				deleted[i] = true
			case f.Recreate && oldPods[i] == nil && deleted[i] && !created[i]:
				jobs <- job{create: i}
				created[i] = true
			case !f.Recreate && oldPods[i] != nil && newReady[i] && !deleted[i]:
				jobs <- job{del: oldPods[i]}
				deleted[i] = true
			}
		}
		return allAtRevision(pods, f.N, want)
	})
	if err != nil {
		select {
		case e := <-errc:
			return 0, e
		default:
		}
		return 0, err
	}
	f.rev = next
	return time.Since(start), nil
}
