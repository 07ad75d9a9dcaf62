package jobspec

import (
	"go.yaml.in/yaml/v3"

	"trainyard/internal/domain"
)

// resumeFields are the fields of the spec's resume mapping
// (domain.ResumeFrom).
var resumeFields = []string{"job", "checkpoint"}

// resume decodes the resume mapping: which job's checkpoint the job
// starts from.
func (d *decoder) resume(p string, v *yaml.Node, s *domain.Spec) {
	r := &domain.ResumeFrom{}
	d.fields(p, v, resumeFields, func(key, p string, v *yaml.Node) {
		switch key {
		case "job":
			var n int
			if d.integer(p, v, &n) {
				r.Job = int64(n)
			}
		case "checkpoint":
			d.str(p, v, &r.Checkpoint)
		}
	})
	s.Resume = r
}

// checkResume checks the shape of resume; whether the job and its
// checkpoint exist, and may be read, is the submit's to check.
func checkResume(es *domain.FieldErrors, r *domain.ResumeFrom) {
	if r == nil {
		return
	}
	if r.Job <= 0 {
		es.Add("resume.job", "must be the id of the job whose checkpoint to start from (a positive number), e.g. 12; or use: trainyard rerun 12 --resume")
	}
	switch {
	case r.Checkpoint == "":
		es.Add("resume.checkpoint", "is required: the name of one of that job's checkpoints (see: trainyard checkpoints ls JOB)")
	case !domain.IsCheckpointName(r.Checkpoint):
		es.Add("resume.checkpoint", "%q is not a checkpoint name (one name directly below the checkpoint directory); see the job's with: trainyard checkpoints ls JOB", r.Checkpoint)
	}
}
