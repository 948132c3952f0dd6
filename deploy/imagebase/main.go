// Command imagebase builds the base image of acemq-flow's container images
// without a network or a Docker daemon, and serves it to ko from a registry
// on loopback (ko pulls its base from a registry, and none may be reachable
// from the machine that builds).
//
// The base holds what a static Go binary needs and nothing to run a shell
// with, as distroless's static:nonroot does: /etc/passwd and /etc/group with
// the nonroot user (65532), /etc/nsswitch.conf, the CA bundle of the
// building machine (Debian's ca-certificates), an empty /tmp and
// /home/nonroot. Its config runs as 65532:65532. Every file has the time
// 0 and a fixed owner, so that the same CA bundle gives the same digest.
//
//	imagebase --addr-file F [--addr 127.0.0.1:35171] [--ca-bundle PATH] [--repo acemq/base]
//
// pushes the base as <addr>/<repo>:static-nonroot, writes <addr> (a
// 127.0.0.1 address: --addr, or any free port when it is taken) to F once
// the push is done, and serves until SIGINT or SIGTERM. scripts/image.sh
// runs it, as KO_DEFAULTBASEIMAGE.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Tag is the tag the base is pushed as.
const Tag = "static-nonroot"

func main() {
	addrFile := flag.String("addr-file", "", "file to write the registry's address to once the base is pushed (required)")
	addr := flag.String("addr", "127.0.0.1:35171", "loopback address to serve the registry on; when it is taken, any free port")
	caBundle := flag.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "the CA certificates (PEM) the image trusts")
	repo := flag.String("repo", "acemq/base", "repository the base is pushed to")
	flag.Parse()
	if *addrFile == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "imagebase: usage: imagebase --addr-file FILE [--ca-bundle PATH] [--repo NAME]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, *addrFile, *caBundle, *repo); err != nil {
		fmt.Fprintf(os.Stderr, "imagebase: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, want, addrFile, caBundle, repo string) error {
	ca, err := os.ReadFile(caBundle)
	if err != nil {
		return fmt.Errorf("read the CA bundle: %w; install Debian's ca-certificates or give --ca-bundle", err)
	}
	img, err := Base(ca, runtime.GOARCH)
	if err != nil {
		return err
	}
	// ko writes the base's name, this address included, into each image's
	// annotations (org.opencontainers.image.base.name): the same address
	// each time gives the same digests for the same commit.
	ln, err := net.Listen("tcp", want)
	if err != nil {
		fmt.Fprintf(os.Stderr, "imagebase: %s is taken (%v); serving on another port, so the images' base name and digests differ from other builds\n", want, err)
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return fmt.Errorf("listen on loopback: %w", err)
		}
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0))), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer srv.Close()

	addr := ln.Addr().String()
	// A registry on 127.0.0.1 is spoken to over plain HTTP.
	ref, err := name.ParseReference(addr + "/" + repo + ":" + Tag)
	if err != nil {
		return fmt.Errorf("name the base: %w", err)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("push the base to the registry on %s: %w", addr, err)
	}
	if err := os.WriteFile(addrFile, []byte(addr+"\n"), 0o644); err != nil {
		return fmt.Errorf("write the address: %w", err)
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-served:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serve the registry: %w", err)
	}
}

// Base returns the base image for linux/arch with ca as its CA bundle.
func Base(ca []byte, arch string) (v1.Image, error) {
	layer, err := baseLayer(ca)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:       layer,
		MediaType:   types.OCILayer,
		History:     v1.History{CreatedBy: "imagebase: passwd, group, nsswitch.conf, CA certificates, /tmp, /home/nonroot", Created: v1.Time{Time: time.Unix(0, 0).UTC()}},
		Annotations: nil,
	})
	if err != nil {
		return nil, fmt.Errorf("add the base layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = arch
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.User = "65532:65532"
	cf.Config.WorkingDir = "/home/nonroot"
	cf.Config.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
		"HOME=/home/nonroot",
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set the base's config: %w", err)
	}
	return img, nil
}

func baseLayer(ca []byte) (v1.Layer, error) {
	type entry struct {
		name     string
		mode     int64
		uid, gid int
		body     string
	}
	entries := []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/passwd", mode: 0o644, body: "root:x:0:0:root:/root:/sbin/nologin\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
			"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"},
		{name: "etc/group", mode: 0o644, body: "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"},
		{name: "etc/nsswitch.conf", mode: 0o644, body: "hosts: files dns\n"},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, body: string(ca)},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: 65532, gid: 65532},
		{name: "root/", mode: 0o700},
		{name: "tmp/", mode: 0o1777},
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if e.name[len(e.name)-1] == '/' {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("write %s into the base layer: %w", e.name, err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			return nil, fmt.Errorf("write %s into the base layer: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := b.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
