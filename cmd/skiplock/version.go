package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// buildVersion is what `skiplock version` reports: the stamp of a release build
// (scripts/release.sh), else the build information the Go toolchain embeds: the
// module version (a tag with go install …@v1.2.3, "(devel)" for a build from a
// checkout) and the VCS revision of a checkout build.
type buildVersion struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
}

// The release build (scripts/release.sh) stamps these with -ldflags -X: the version
// (a tag, or git describe), the commit and the commit's date (not the build's, so two
// builds of one commit are the same bytes). Such a build has no VCS information of its
// own (-buildvcs=false); a stamp wins over what the build information says.
var (
	version string
	commit  string
	date    string
)

func readBuildVersion() buildVersion {
	v := buildInfoVersion()
	if version != "" {
		v.Version = version
	}
	if commit != "" {
		v.Revision, v.Time, v.Modified = commit, date, false
	}
	return v
}

// buildInfoVersion is the version the Go toolchain's build information gives.
func buildInfoVersion() buildVersion {
	v := buildVersion{Module: "github.com/skiplock/skiplock", Version: "unknown", Go: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if info.Main.Path != "" {
		v.Module = info.Main.Path
	}
	if info.Main.Version != "" {
		v.Version = info.Main.Version
	}
	v.Go = info.GoVersion
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func newVersionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "print the module version and VCS revision this binary was built from",
		Args:  noArgs,
	}
	out := newOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		v := readBuildVersion()
		if out.json() {
			return printJSON(cmd.OutOrStdout(), v)
		}
		_, err := fmt.Fprintln(cmd.OutOrStdout(), v.line())
		return err
	}
	return cmd
}

// line is the version as `skiplock version` and `skiplock --version` print it.
func (v buildVersion) line() string {
	line := fmt.Sprintf("skiplock %s (%s", v.Version, v.Module)
	if v.Revision != "" {
		line += ", revision " + v.Revision
		if v.Modified {
			line += " with local changes"
		}
		if v.Time != "" {
			line += ", committed " + v.Time
		}
	} else {
		line += ", no VCS revision: built outside a checkout or with -buildvcs=false"
	}
	return line + ", " + v.Go + ")"
}
