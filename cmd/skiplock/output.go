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

// register adds the flags to cmd.
func (p *pageFlags) register(cmd *cobra.Command) {
	intFlag(cmd, &p.limit, "limit", 50, 1, 10000, "page size, 1..10000")
	cmd.Flags().BoolVar(&p.all, "all", false, "every page, not just the first")
}
