package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// versionView is what `acemq-flow version` prints: what the Go toolchain
// recorded in the binary (runtime/debug.ReadBuildInfo), nothing computed.
type versionView struct {
	Module     string `json:"module"`
	Version    string `json:"version"`
	Commit     string `json:"commit"`      // vcs.revision; empty when built without version control
	CommitTime string `json:"commit_time"` // vcs.time, RFC 3339
	Modified   bool   `json:"modified"`    // vcs.modified: the tree had uncommitted changes
	Go         string `json:"go"`
	Platform   string `json:"platform"`
}

// readVersion turns the build information into a versionView. bi is nil
// when the binary carries none.
func readVersion(bi *debug.BuildInfo) versionView {
	v := versionView{
		Module:   "github.com/acemq/acemq-flow",
		Version:  "(unknown)",
		Go:       runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH,
	}
	if bi == nil {
		return v
	}
	if bi.Main.Path != "" {
		v.Module = bi.Main.Path
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		v.Go = bi.GoVersion
	}
	var goos, goarch string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.CommitTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	if goos != "" && goarch != "" {
		v.Platform = goos + "/" + goarch
	}
	return v
}

func newVersionCmd(s streams) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "version [--format text|json]",
		Short: "Print the version, commit and Go version acemq-flow was built with",
		Long: `Print what the Go toolchain recorded in this binary: the module version
("(devel)" for a build from a work tree, a pseudo-version or tag for
go install …@version), the commit it was built from, whether that tree had
uncommitted changes, and the Go version and platform.

A binary built from a git checkout (go build, make build, make image)
carries its commit; one built without version control information
(go run, -buildvcs=false, a source archive) says so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "json" {
				return usage("--format must be text or json, not %q", format)
			}
			bi, _ := debug.ReadBuildInfo()
			return renderVersion(s.out, format, readVersion(bi))
		},
	}
	cmd.Flags().StringVar(&format, "format", "text", "output format: text or json")
	return cmd
}

// renderVersion writes v in format, text or json.
func renderVersion(w io.Writer, format string, v versionView) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	commit := "unknown (built without version control information)"
	if v.Commit != "" {
		commit = v.Commit
		if v.CommitTime != "" {
			commit += " (" + v.CommitTime + ")"
		}
		if v.Modified {
			commit += ", with uncommitted changes"
		}
	}
	_, err := fmt.Fprintf(w, "acemq-flow %s\nmodule:   %s\ncommit:   %s\ngo:       %s %s\n",
		v.Version, v.Module, commit, v.Go, v.Platform)
	return err
}
