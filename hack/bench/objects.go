package bench

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

func intstrInt(v int) intstr.IntOrString { return intstr.FromInt32(int32(v)) }

func ensureNamespace(ctx context.Context, cs kubernetes.Interface, ns string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	return nil
}

// CreatePVs pre-creates n ReadWriteOncePod PersistentVolumes of storage class class, so claims of
// that class bind without a provisioner. kwok mounts nothing; the hostPath is never touched.
func CreatePVs(ctx context.Context, cs kubernetes.Interface, class string, n int) error {
	immediate := storagev1.VolumeBindingImmediate
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class},
		Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &immediate}
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create StorageClass %s: %w", class, err)
	}
	return parallel(ctx, n, 16, func(ctx context.Context, i int) error {
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", class, i)},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				StorageClassName:              class,
				PersistentVolumeSource: corev1.PersistentVolumeSource{
					HostPath: &corev1.HostPathVolumeSource{Path: "/nonexistent/nogoo9-bench/" + class},
				},
			},
		}
		if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create PV %s: %w", pv.Name, err)
		}
		return nil
	})
}

// createRWOPClaims creates n PVs of class and one ReadWriteOncePod claim per index named name(i).
func createRWOPClaims(ctx context.Context, cs kubernetes.Interface, ns, class string, n int, name func(int) string) error {
	if err := CreatePVs(ctx, cs, class, n); err != nil {
		return err
	}
	return parallel(ctx, n, 16, func(ctx context.Context, i int) error {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name(i), Namespace: ns},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod},
				StorageClassName: &class,
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create claim %s/%s: %w", ns, pvc.Name, err)
		}
		return nil
	})
}
