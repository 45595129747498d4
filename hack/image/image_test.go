package main

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// maxImageBytes bounds the compressed image (today about 19 MiB): a bigger one means something
// other than the static binary got in, or the binary grew by a dependency worth a look.
const maxImageBytes = 40 << 20

// TestImageRunsAsTheManifestsExpect builds the image the way `make image` does (the real target,
// into a temporary BIN) and reads it back from both outputs, then checks it against every
// Deployment in config/: entrypoint, numeric non-root user, no shell, version stamp, size.
func TestImageRunsAsTheManifestsExpect(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	version := "imagetest-" + randomHex(t)
	cmd := exec.Command("make", "--no-print-directory", "-C", root, "image", "BIN="+bin, "VERSION="+version)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}

	img := readLayout(t, filepath.Join(bin, "image", "oci"), version)
	fromTar := readTarball(t, filepath.Join(bin, "image", "nogoo9.tar"), version)
	// The tarball keeps the config and layers but rewrites the manifest in Docker's media types.
	c1, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	c2, err := fromTar.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if c1 != c2 {
		t.Errorf("the OCI layout's config is %s but the tarball's %s: both outputs must be the same image", c1, c2)
	}
	if err := validate.Image(img); err != nil {
		t.Fatalf("the image is not consistent (digests, sizes, diff IDs): %v", err)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	files := layerFiles(t, img)
	deployments := manifestDeployments(t, filepath.Join(root, "config"))
	if len(deployments) == 0 {
		t.Fatal("found no Deployment in config/: the test would check nothing")
	}

	t.Run("the entrypoint is the binary and the manifests only pass flags to it", func(t *testing.T) {
		if !slices.Equal(cf.Config.Entrypoint, []string{Entrypoint}) || len(cf.Config.Cmd) != 0 {
			t.Errorf("entrypoint %q cmd %q: want entrypoint [%s] and no cmd", cf.Config.Entrypoint, cf.Config.Cmd, Entrypoint)
		}
		f, ok := files[strings.TrimPrefix(Entrypoint, "/")]
		if !ok {
			t.Fatalf("the image has no file at the entrypoint %s; it has %v", Entrypoint, keys(files))
		}
		if f.hdr.Mode&0o111 == 0 || f.hdr.Mode&0o022 != 0 || f.hdr.Uid != 0 {
			t.Errorf("%s: mode %o uid %d: want executable, writable by no one, owned by root (the image's user must not be able to replace it)", Entrypoint, f.hdr.Mode, f.hdr.Uid)
		}
		for where, c := range deployments {
			if len(c.Command) != 0 && !slices.Equal(c.Command, []string{Entrypoint}) {
				t.Errorf("%s: command %q overrides the image's entrypoint %s", where, c.Command, Entrypoint)
			}
			for _, a := range c.Args {
				if !strings.HasPrefix(a, "--") {
					t.Errorf("%s: argument %q is not a flag: the entrypoint is the nogoo9 binary itself", where, a)
				}
			}
		}
	})

	t.Run("the user is numeric, not root, and the one the manifests run as", func(t *testing.T) {
		uid, gid, ok := strings.Cut(cf.Config.User, ":")
		u, err1 := strconv.Atoi(uid)
		g, err2 := strconv.Atoi(gid)
		if !ok || err1 != nil || err2 != nil || u == 0 || g == 0 {
			t.Fatalf("user %q: want numeric uid:gid, neither 0 (runAsNonRoot needs a numeric user: the image has no /etc/passwd)", cf.Config.User)
		}
		for where, pod := range podSecurity(t, filepath.Join(root, "config")) {
			if pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot {
				t.Errorf("%s: runAsNonRoot is not true", where)
			}
			if pod.RunAsUser == nil || *pod.RunAsUser != int64(u) || pod.RunAsGroup == nil || *pod.RunAsGroup != int64(g) {
				t.Errorf("%s: runAsUser/runAsGroup %v/%v differ from the image's user %s", where, deref(pod.RunAsUser), deref(pod.RunAsGroup), cf.Config.User)
			}
		}
	})

	t.Run("no shell: the image holds only the static binary and the manifests never exec one", func(t *testing.T) {
		if got := keys(files); !slices.Equal(got, []string{"nogoo9"}) {
			t.Errorf("the layer holds %v: want only nogoo9", got)
		}
		for _, sh := range []string{"bin/sh", "bin/bash", "bin/ash", "bin/busybox", "usr/bin/sh"} {
			if _, ok := files[sh]; ok {
				t.Errorf("the image has /%s", sh)
			}
		}
		ef, err := elf.NewFile(bytes.NewReader(files["nogoo9"].data))
		if err != nil {
			t.Fatalf("the binary is not an ELF file: %v", err)
		}
		for _, p := range ef.Progs {
			if p.Type == elf.PT_INTERP {
				t.Error("the binary names a dynamic loader (PT_INTERP): it must be static, the image has no libc")
			}
		}
		if libs, _ := ef.ImportedLibraries(); len(libs) != 0 {
			t.Errorf("the binary needs shared libraries %v: it must be static", libs)
		}
		for where, c := range deployments {
			for probe, h := range map[string]*corev1.Probe{"livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe, "startupProbe": c.StartupProbe} {
				if h != nil && h.Exec != nil {
					t.Errorf("%s: %s execs %q: the image has no shell or other binary to run", where, probe, h.Exec.Command)
				}
			}
			if l := c.Lifecycle; l != nil && ((l.PostStart != nil && l.PostStart.Exec != nil) || (l.PreStop != nil && l.PreStop.Exec != nil)) {
				t.Errorf("%s: a lifecycle hook execs a command: the image has no shell", where)
			}
		}
	})

	t.Run("the version is stamped on the image and into the binary", func(t *testing.T) {
		if got := cf.Config.Labels[VersionLabel]; got != version {
			t.Errorf("label %s = %q, want %q", VersionLabel, got, version)
		}
		bi, err := buildinfo.Read(bytes.NewReader(files["nogoo9"].data))
		if err != nil {
			t.Fatalf("read the binary's build info: %v", err)
		}
		settings := map[string]string{}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
		// -trimpath keeps -ldflags out of the build info, so look for the stamped string itself.
		if !bytes.Contains(files["nogoo9"].data, []byte(version)) {
			t.Errorf("the binary does not contain the version string %q", version)
		}
		if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
			t.Errorf("CGO_ENABLED=%q -trimpath=%q: want 0 and true (make build)", settings["CGO_ENABLED"], settings["-trimpath"])
		}
		if !slices.ContainsFunc(bi.Deps, func(m *debug.Module) bool { return m.Path == "golang.org/x/crypto/x509roots/fallback" }) {
			t.Error("the binary does not link golang.org/x/crypto/x509roots/fallback: with no /etc/ssl in the image, TLS to an OIDC issuer would fail")
		}
	})

	t.Run("the image stays small", func(t *testing.T) {
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		total := m.Config.Size
		for _, l := range m.Layers {
			total += l.Size
		}
		if len(m.Layers) != 1 {
			t.Errorf("%d layers, want 1", len(m.Layers))
		}
		t.Logf("compressed image: %d bytes (binary %d bytes)", total, len(files["nogoo9"].data))
		if total > maxImageBytes {
			t.Errorf("the compressed image is %d bytes, over the bound of %d", total, maxImageBytes)
		}
	})
}

func randomHex(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// readLayout returns the one image of the OCI layout at dir, checking its ref name.
func readLayout(t *testing.T, dir, version string) v1.Image {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("read OCI layout: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("the OCI layout holds %d manifests, want 1", len(im.Manifests))
	}
	if got := im.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; got != Repository+":"+version {
		t.Errorf("ref name %q, want %s:%s", got, Repository, version)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func readTarball(t *testing.T, file, version string) v1.Image {
	t.Helper()
	tag, err := name.NewTag(Repository + ":" + version)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(file, &tag)
	if err != nil {
		t.Fatalf("read tarball %s as %s: %v", file, tag, err)
	}
	return img
}

type layerFile struct {
	hdr  *tar.Header
	data []byte
}

// layerFiles reads every entry of every layer, by path without the leading slash.
func layerFiles(t *testing.T, img v1.Image) map[string]layerFile {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]layerFile{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[path.Clean(strings.TrimPrefix(hdr.Name, "/"))] = layerFile{hdr: hdr, data: data}
		}
		rc.Close()
	}
	return files
}

func keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// deploymentsIn decodes every Deployment (whole or a patch) in the YAML files under dir.
func deploymentsIn(t *testing.T, dir string) map[string]appsv1.Deployment {
	t.Helper()
	out := map[string]appsv1.Deployment{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
		for i := 0; ; i++ {
			var dep appsv1.Deployment
			if err := dec.Decode(&dep); errors.Is(err, io.EOF) {
				return nil
			} else if err != nil {
				return err
			}
			if dep.Kind == "Deployment" {
				rel, _ := filepath.Rel(dir, p)
				out[rel+"#"+strconv.Itoa(i)+" "+dep.Name] = dep
			}
		}
	})
	if err != nil {
		t.Fatalf("read config/: %v", err)
	}
	return out
}

// manifestDeployments returns nogoo9's container in every Deployment or patch under config/.
func manifestDeployments(t *testing.T, dir string) map[string]corev1.Container {
	out := map[string]corev1.Container{}
	for where, dep := range deploymentsIn(t, dir) {
		for _, c := range dep.Spec.Template.Spec.Containers {
			if c.Name == "nogoo9" {
				out[where] = c
			}
		}
	}
	return out
}

// podSecurity returns the pod security context of every full Deployment under config/ (patches
// that leave it alone are skipped: the Deployment they patch is checked).
func podSecurity(t *testing.T, dir string) map[string]*corev1.PodSecurityContext {
	out := map[string]*corev1.PodSecurityContext{}
	for where, dep := range deploymentsIn(t, dir) {
		if dep.Spec.Template.Spec.SecurityContext != nil || dep.Spec.Selector != nil {
			out[where] = dep.Spec.Template.Spec.SecurityContext
			if out[where] == nil {
				out[where] = &corev1.PodSecurityContext{}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("found no Deployment with a pod securityContext in config/")
	}
	return out
}
