package slurm

// WithCommandHook returns cfg with f told the name of every Slurm command
// (squeue, sacct, scontrol, sbatch, scancel) its executor runs.
func WithCommandHook(cfg Config, f func(name string)) Config {
	cfg.onCommand = f
	return cfg
}
