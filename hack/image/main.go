// Command image builds nogoo9's container image without a container engine (`make image`).
//
// The image is built from scratch with go-containerregistry: one layer holding the static binary
// `make build` produced, at /nogoo9, owned by root and not writable by the user the image runs as.
// There is nothing else in it: no shell, no package manager, no /etc. The CA roots are compiled
// into the binary (golang.org/x/crypto/x509roots/fallback, imported by main.go), and the numeric
// user needs no /etc/passwd. The output is an OCI image layout and a tarball that `crane push`,
// `ctr image import` or `docker load` accept.
//
//	go run ./hack/image --binary bin/nogoo9 --version v0.1.0 --out bin/image
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The facts the manifests in config/ rely on; hack/image/image_test.go checks both sides.
const (
	// Entrypoint is where the binary lives; the manifests give only args.
	Entrypoint = "/nogoo9"
	// User is the numeric user and group the manifests' runAsUser and runAsGroup name.
	User = "65532:65532"
	// VersionLabel carries the version `-X main.version` stamped into the binary.
	VersionLabel = "org.opencontainers.image.version"
	// Repository is the image name in the tarball and the OCI layout's ref name prefix.
	Repository = "nogoo9"
)

// Spec is what one image is built from.
type Spec struct {
	Binary  []byte    // the static nogoo9 binary
	Version string    // the version stamped into it
	Arch    string    // GOARCH the binary was built for
	Created time.Time // image and file timestamps (fixed, so the same binary gives the same digest)
}

// Build returns the image: one layer with the binary at Entrypoint, the config naming the
// entrypoint, the numeric user, the ports of config/manager and the version label.
func Build(s Spec) (v1.Image, error) {
	if len(s.Binary) == 0 {
		return nil, errors.New("the binary is empty: run `make build` first")
	}
	if s.Version == "" {
		return nil, errors.New("the version is empty: pass --version (make image passes $(VERSION))")
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     Entrypoint[1:],
		Mode:     0o555,
		Size:     int64(len(s.Binary)),
		ModTime:  s.Created,
		Format:   tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, fmt.Errorf("write layer header: %w", err)
	}
	if _, err := tw.Write(s.Binary); err != nil {
		return nil, fmt.Errorf("write layer: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close layer: %w", err)
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("make layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: s.Created}, CreatedBy: "hack/image: COPY bin/nogoo9 /nogoo9"},
	})
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = s.Arch
	cf.Created = v1.Time{Time: s.Created}
	cf.Config = v1.Config{
		Entrypoint: []string{Entrypoint},
		User:       User,
		WorkingDir: "/",
		ExposedPorts: map[string]struct{}{
			"8080/tcp": {}, "8081/tcp": {}, "8090/tcp": {}, "8091/tcp": {},
		},
		Labels: map[string]string{
			VersionLabel:                      s.Version,
			"org.opencontainers.image.title":  "nogoo9",
			"org.opencontainers.image.source": "hack/image",
		},
	}
	return mutate.ConfigFile(img, cf)
}

// Write saves img as an OCI image layout in dir/oci and as a tarball dir/nogoo9.tar, both named
// nogoo9:version, replacing what an earlier run left there.
func Write(img v1.Image, version, dir string) error {
	tag, err := name.NewTag(Repository + ":" + version)
	if err != nil {
		return fmt.Errorf("version %q is not a valid image tag: use letters, digits, '.', '_' and '-': %w", version, err)
	}
	ociDir := filepath.Join(dir, "oci")
	if err := os.RemoveAll(ociDir); err != nil {
		return err
	}
	p, err := layout.Write(ociDir, empty.Index)
	if err != nil {
		return fmt.Errorf("write OCI layout %s: %w", ociDir, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": Repository + ":" + version,
	})); err != nil {
		return fmt.Errorf("write OCI layout %s: %w", ociDir, err)
	}
	tarPath := filepath.Join(dir, Repository+".tar")
	if err := tarball.WriteToFile(tarPath, tag, img); err != nil {
		return fmt.Errorf("write tarball %s: %w", tarPath, err)
	}
	return nil
}

func main() {
	binary := flag.String("binary", "bin/nogoo9", "the static nogoo9 binary (make build)")
	version := flag.String("version", "", "the version stamped into the binary; the image's tag and label")
	arch := flag.String("arch", runtime.GOARCH, "GOARCH the binary was built for")
	out := flag.String("out", "bin/image", "output directory: OCI layout in <out>/oci, tarball <out>/nogoo9.tar")
	epoch := flag.Int64("created", 0, "image creation time, Unix seconds (default 0: reproducible; make image passes the commit time)")
	flag.Parse()
	if err := run(*binary, *version, *arch, *out, time.Unix(*epoch, 0).UTC()); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(binary, version, arch, out string, created time.Time) error {
	b, err := os.ReadFile(binary)
	if err != nil {
		return fmt.Errorf("read the binary: %w (run `make build` first)", err)
	}
	img, err := Build(Spec{Binary: b, Version: version, Arch: arch, Created: created})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := Write(img, version, out); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("image %s:%s %s\n  OCI layout: %s\n  tarball:    %s\n", Repository, version, d,
		filepath.Join(out, "oci"), filepath.Join(out, Repository+".tar"))
	return nil
}
