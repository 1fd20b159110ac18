package main

import (
	"encoding/json"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// outputFlag is the -o table|json flag of every command that prints data.
type outputFlag struct{ enumFlag }

func newOutputFlag(cmd *cobra.Command) *outputFlag {
	o := &outputFlag{enumFlag{value: "table", valid: []string{"table", "json"}}}
	addEnum(cmd, &o.enumFlag, "output", "o", "output format")
	return o
}

func (o *outputFlag) json() bool { return o.value == "json" }

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// oneLine returns the first line of s, cut to n runes.
func oneLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return s
}

// pageFlags are the paging flags of the list commands: --limit and --all.
type pageFlags struct {
	limit int
	all   bool
}

// register adds the flags to cmd and checks --limit before it runs.
func (p *pageFlags) register(cmd *cobra.Command) {
	cmd.Flags().IntVar(&p.limit, "limit", 50, "page size, 1..10000")
	cmd.Flags().BoolVar(&p.all, "all", false, "every page, not just the first")
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if p.limit < 1 || p.limit > 10000 {
			return usagef(cmd, "--limit %d: want 1..10000", p.limit)
		}
		return nil
	}
}
