package slurm

// WithCommandHook returns cfg with f told the name and arguments of every
// Slurm command (squeue, sacct, scontrol, sbatch, scancel) its executor
// runs.
func WithCommandHook(cfg Config, f func(name string, args []string)) Config {
	cfg.onCommand = f
	return cfg
}
