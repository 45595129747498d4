package localcluster

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VolumeOptions describes PersistentVolumes for CreateVolumes.
type VolumeOptions struct {
	// StorageClassName the volumes carry (required); a StorageClass of that name with no
	// provisioner and Immediate binding is created if missing, so claims bind as soon as they
	// are made.
	StorageClassName string
	// Count of volumes (default 1), named <StorageClassName>-pv-<n> (n from Offset).
	Count  int
	Offset int
	// Size of each volume (default 1Gi); a claim binds to a volume at least as large.
	Size string
	// AccessModes of each volume (default ReadWriteOnce). A ReadWriteOncePod claim binds only to
	// a volume with exactly ReadWriteOncePod (the API refuses it alongside other modes).
	AccessModes []corev1.PersistentVolumeAccessMode
}

// CreateVolumes creates hostPath PersistentVolumes (under Dir/volumes; kwok never mounts them)
// so that claims with a matching storageClassName bind through the real PV controller, and the
// scheduler enforces their access modes (ReadWriteOncePod included). It returns their names.
func (c *Cluster) CreateVolumes(ctx context.Context, o VolumeOptions) ([]string, error) {
	if o.StorageClassName == "" {
		return nil, fmt.Errorf("localcluster: VolumeOptions.StorageClassName is empty: name the class your claims request")
	}
	if o.Count == 0 {
		o.Count = 1
	}
	if o.Size == "" {
		o.Size = "1Gi"
	}
	size, err := resource.ParseQuantity(o.Size)
	if err != nil {
		return nil, fmt.Errorf("localcluster: VolumeOptions.Size %q: %w (use a quantity like 1Gi)", o.Size, err)
	}
	if len(o.AccessModes) == 0 {
		o.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	if err := c.ensureStorageClass(ctx, o.StorageClassName); err != nil {
		return nil, err
	}
	hostPathType := corev1.HostPathDirectoryOrCreate
	var names []string
	for i := o.Offset; i < o.Offset+o.Count; i++ {
		name := fmt.Sprintf("%s-pv-%d", o.StorageClassName, i)
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"nogoo9-local/storage-class": o.StorageClassName}},
			Spec: corev1.PersistentVolumeSpec{
				StorageClassName:              o.StorageClassName,
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
				AccessModes:                   o.AccessModes,
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
				PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
					Path: filepath.Join(c.layout.volumesDir(), name), Type: &hostPathType,
				}},
			},
		}
		if _, err := c.clientset.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return names, fmt.Errorf("create PersistentVolume %s: %w", name, err)
		}
		names = append(names, name)
	}
	return names, nil
}

func (c *Cluster) ensureStorageClass(ctx context.Context, name string) error {
	immediate := storagev1.VolumeBindingImmediate
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: name},
		Provisioner:       "kubernetes.io/no-provisioner",
		VolumeBindingMode: &immediate,
	}
	_, err := c.clientset.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create StorageClass %s: %w", name, err)
	}
	return nil
}

// ServiceAccountToken mints a token for service account namespace/name (created if missing)
// with the given audience, through the TokenRequest API. The token is an OIDC ID token of
// IssuerURL, subject system:serviceaccount:<namespace>:<name>. ttl 0 means one hour. A token
// meant for the API server itself (WriteKubeconfig) needs audience IssuerURL, the API server's
// default audience.
func (c *Cluster) ServiceAccountToken(ctx context.Context, namespace, name, audience string, ttl time.Duration) (string, error) {
	if ttl == 0 {
		ttl = time.Hour
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if _, err := c.clientset.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create service account %s/%s: %w", namespace, name, err)
	}
	secs := int64(ttl / time.Second)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{audience}, ExpirationSeconds: &secs,
	}}
	out, err := c.clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, tr, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request token for %s/%s (audience %q): %w", namespace, name, audience, err)
	}
	return out.Status.Token, nil
}

// WriteKubeconfig writes a kubeconfig at path for this cluster that authenticates with token
// (for example one from ServiceAccountToken), to run a process as that identity.
func (c *Cluster) WriteKubeconfig(path, token string) error {
	return WriteKubeconfig(path, c.APIServerURL, c.CAFile, token)
}
