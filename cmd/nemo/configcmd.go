package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/nemocache/nemo/config"
)

func configCmd(stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Inspect the configuration",
		Long: `Inspect the configuration nemo would run with. Every key, its default and
its environment variable are in config/nemo.example.yaml.`,
		Example: `  nemo config print`,
		Args:    cobra.NoArgs,
	}
	printCmd := &cobra.Command{
		Use:   "print",
		Short: "Print the effective configuration as YAML, secrets redacted",
		Long: `Print the configuration nemo would run with, after defaults, the file,
NEMO_* environment variables and flags are applied, in the file format
(sizes as "256MiB", durations as "5s"). Secrets print as REDACTED. An invalid
configuration prints every problem and exits with status 2.`,
		Example: `  nemo config print --config nemo.yaml
  NEMO_CACHE_MAX_BYTES=1GiB nemo config print --cache-policy record`,
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
	}
	config.RegisterFlags(printCmd.Flags())
	cmd.AddCommand(printCmd)
	return cmd
}
