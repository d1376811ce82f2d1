package main

import (
	"io"

	"github.com/spf13/cobra"
)

func configCmd(stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Inspect the configuration",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "print",
		Short: "Print the effective configuration as YAML, secrets redacted",
		Long: `Print the configuration nemo would run with, after defaults, the file,
NEMO_* environment variables and flags are applied, in the file format
(sizes as "256MiB", durations as "5s"). Secrets print as REDACTED. An invalid
configuration prints every problem and exits with status 2.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			out, err := cfg.Redacted().YAML()
			if err != nil {
				return err
			}
			_, err = stdout.Write(out)
			return err
		},
	})
	return cmd
}
