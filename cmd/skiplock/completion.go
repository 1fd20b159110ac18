package main

import (
	"io"

	"github.com/spf13/cobra"
)

// completionShell is one shell skiplock completion writes a script for.
type completionShell struct {
	name string
	load string // how to load the script, for the command's help
	gen  func(root *cobra.Command, w io.Writer, descriptions bool) error
}

var completionShells = []completionShell{
	{"bash", `Needs the bash-completion package. Load it in this shell:

  source <(skiplock completion bash)

or for every new shell: skiplock completion bash > /etc/bash_completion.d/skiplock`,
		func(root *cobra.Command, w io.Writer, desc bool) error { return root.GenBashCompletionV2(w, desc) }},
	{"zsh", `Needs compinit (autoload -U compinit; compinit in ~/.zshrc). Load it in this shell:

  source <(skiplock completion zsh)

or for every new shell: skiplock completion zsh > "${fpath[1]}/_skiplock"`,
		func(root *cobra.Command, w io.Writer, desc bool) error {
			if desc {
				return root.GenZshCompletion(w)
			}
			return root.GenZshCompletionNoDesc(w)
		}},
	{"fish", `Load it in this shell:

  skiplock completion fish | source

or for every new shell: skiplock completion fish > ~/.config/fish/completions/skiplock.fish`,
		func(root *cobra.Command, w io.Writer, desc bool) error { return root.GenFishCompletion(w, desc) }},
	{"powershell", `Load it in this shell:

  skiplock completion powershell | Out-String | Invoke-Expression

or for every new shell: add that line to your PowerShell profile.`,
		func(root *cobra.Command, w io.Writer, desc bool) error {
			if desc {
				return root.GenPowerShellCompletionWithDesc(w)
			}
			return root.GenPowerShellCompletion(w)
		}},
}

// newCompletionCmd replaces cobra's default completion command, which prints help
// and exits 0 without a shell or with an unknown one: here those are usage errors,
// like every other group's.
func newCompletionCmd() *cobra.Command {
	var subs []*cobra.Command
	for _, sh := range completionShells {
		var noDesc bool
		c := &cobra.Command{
			Use:   sh.name,
			Short: "print the " + sh.name + " completion script",
			Long:  "Print the " + sh.name + " completion script for skiplock on stdout.\n\n" + sh.load,
			Args:  noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return sh.gen(cmd.Root(), cmd.OutOrStdout(), !noDesc)
			},
		}
		c.Flags().BoolVar(&noDesc, "no-descriptions", false, "complete without the commands' and flags' descriptions")
		subs = append(subs, c)
	}
	return group("completion", "print the shell completion script (bash, zsh, fish or powershell)", subs...)
}
