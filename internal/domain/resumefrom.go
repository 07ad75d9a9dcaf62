package domain

// ResumeFrom names the checkpoint of another job a job starts from (spec
// field resume): `trainyard rerun ID --resume` sets it to the original's
// latest complete checkpoint, so that a run stopped by mistake continues
// where it was instead of from step 0. The control loop copies that
// checkpoint into the new job's checkpoint directory before its first
// attempt and hands it over as TRAINYARD_RESUME_FROM; the job's own
// checkpoints, once it has any, come first. It is part of the config
// snapshot, so the job's lineage keeps it.
type ResumeFrom struct {
	Job        int64  `json:"job"`        // the job whose checkpoint it is (same project)
	Checkpoint string `json:"checkpoint"` // a registered checkpoint's name, e.g. ckpt-000300.json
}
