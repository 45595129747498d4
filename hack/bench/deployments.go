package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// LabelRev marks every benchmark pod with the revision (round) of the template it was made from.
const LabelRev = "bench.nogoo9/rev"

// benchContainer is the one container of every benchmark pod; kwok never pulls the image.
func benchContainer(rev int) corev1.Container {
	return corev1.Container{Name: "app", Image: "registry.local/bench/app:v" + strconv.Itoa(rev)}
}

// Deployments is the baseline a user would otherwise build: N one-replica Deployments rolled by
// kube-controller-manager's deployment and replicaset controllers.
type Deployments struct {
	Client    kubernetes.Interface
	Namespace string
	N         int
	// Recreate uses strategy Recreate and gives each Deployment a ReadWriteOncePod claim (on a
	// pre-created PV), like recreate-style workspaces; otherwise RollingUpdate (maxSurge 1,
	// maxUnavailable 0: side by side).
	Recreate bool
	rev      int
}

func (d *Deployments) name(i int) string { return fmt.Sprintf("d-%d", i) }

func (d *Deployments) object(i int) *appsv1.Deployment {
	labels := map[string]string{"app": d.name(i)}
	tmplLabels := map[string]string{"app": d.name(i), LabelRev: strconv.Itoa(d.rev)}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: d.name(i), Namespace: d.Namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas:             ptr.To[int32](1),
			RevisionHistoryLimit: ptr.To[int32](1),
			Selector:             &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: tmplLabels},
				Spec: corev1.PodSpec{
					Containers:                    []corev1.Container{benchContainer(d.rev)},
					TerminationGracePeriodSeconds: ptr.To[int64](0),
				},
			},
		},
	}
	if d.Recreate {
		dep.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
		dep.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "home", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: d.name(i)}}}}
	} else {
		one, zero := intstrInt(1), intstrInt(0)
		dep.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &one, MaxUnavailable: &zero}}
	}
	return dep
}

// Setup creates the Deployments (and for Recreate their PVs and claims) and waits until every one
// runs a Ready pod.
func (d *Deployments) Setup(ctx context.Context) error {
	if err := ensureNamespace(ctx, d.Client, d.Namespace); err != nil {
		return err
	}
	if d.Recreate {
		if err := createRWOPClaims(ctx, d.Client, d.Namespace, "bench-rwop-"+d.Namespace, d.N, d.name); err != nil {
			return err
		}
	}
	err := parallel(ctx, d.N, 32, func(ctx context.Context, i int) error {
		_, err := d.Client.AppsV1().Deployments(d.Namespace).Create(ctx, d.object(i), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create deployment %s/%s: %w", d.Namespace, d.name(i), err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return d.waitRolled(ctx, 5*time.Minute)
}

// Roll changes every Deployment's pod template (the image tag) and returns when all of them are
// fully rolled: every pod runs the new revision and is Ready, no old pod is left, and every
// Deployment reports one updated, available replica.
func (d *Deployments) Roll(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	d.rev++
	start := time.Now()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"labels":{%q:%q}},"spec":{"containers":[{"name":"app","image":%q}]}}}}`,
		LabelRev, strconv.Itoa(d.rev), benchContainer(d.rev).Image)
	err := parallel(ctx, d.N, 32, func(ctx context.Context, i int) error {
		_, err := d.Client.AppsV1().Deployments(d.Namespace).Patch(ctx, d.name(i), types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			return fmt.Errorf("patch deployment %s/%s: %w", d.Namespace, d.name(i), err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if err := d.waitRolled(ctx, timeout); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func (d *Deployments) waitRolled(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w, err := watchPods(ctx, d.Client, d.Namespace, "")
	if err != nil {
		return err
	}
	defer w.close()
	want := strconv.Itoa(d.rev)
	if err := w.wait(ctx, fmt.Sprintf("%d deployment pods at revision %s", d.N, want), func(pods []*corev1.Pod) bool {
		return allAtRevision(pods, d.N, want)
	}); err != nil {
		return err
	}
	// The pods say the rollout is done; the Deployments' status follows within moments.
	for {
		list, err := d.Client.AppsV1().Deployments(d.Namespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return fmt.Errorf("list deployments in %s: %w", d.Namespace, err)
		}
		done := len(list.Items) == d.N
		for _, dep := range list.Items {
			st := dep.Status
			if st.ObservedGeneration < dep.Generation || st.UpdatedReplicas != 1 || st.AvailableReplicas != 1 || st.Replicas != 1 {
				done = false
				break
			}
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d deployments in %s to report the rollout complete: %w", d.N, d.Namespace, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// allAtRevision: exactly n pods, all Ready, all at revision want, none being deleted.
func allAtRevision(pods []*corev1.Pod, n int, want string) bool {
	if len(pods) != n {
		return false
	}
	for _, p := range pods {
		if p.Labels[LabelRev] != want || !podReady(p) {
			return false
		}
	}
	return true
}
