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

// oneLine is the first line of s in at most n runes, ending in "…" when anything
// was left out: later lines or the rest of the line. Tabs become spaces (they would
// split a table's cell).
func oneLine(s string, n int) string {
	s = strings.TrimSpace(s)
	line, rest, more := strings.Cut(s, "\n")
	line = strings.ReplaceAll(strings.TrimRight(line, "\r"), "\t", " ")
	r := []rune(line)
	more = more && strings.TrimSpace(rest) != ""
	switch {
	case len(r) > n, more && len(r) > n-2:
		return string(r[:min(len(r), n-1)]) + "…"
	case more:
		return line + " …"
	}
	return line
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

// writeField writes one key/value row of a show command's table to tw (keys in the
// first column, values in the second). A value of several lines — an error with a
// stack or a wrapped multi-line message — keeps its lines: each continuation line
// is a row with an empty key, so tabwriter indents it under the value column. Tabs
// in the value (a Go stack trace indents with them) would end the cell early and
// are written as four spaces; trailing newlines and carriage returns are dropped.
func writeField(tw io.Writer, key, value string) error {
	value = strings.ReplaceAll(strings.TrimRight(value, "\r\n"), "\t", "    ")
	for i, line := range strings.Split(value, "\n") {
		if i > 0 {
			key = ""
		}
		if _, err := io.WriteString(tw, key+"\t"+strings.TrimRight(line, "\r")+"\n"); err != nil {
			return err
		}
	}
	return nil
}
