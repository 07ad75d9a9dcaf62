package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/jobspec"
	"trainyard/internal/store"
)

// TemplateService keeps job templates and expands them for submit.
type TemplateService struct {
	*core
	st   TemplateStore
	envs *EnvService
}

// TemplateStore is what the template use cases read and write.
type TemplateStore interface {
	GetTemplate(ctx context.Context, project, name string, version int) (store.Template, error)
	ListTemplates(ctx context.Context, project string) ([]store.Template, error)
	PutTemplate(ctx context.Context, t store.Template, audit domain.AuditRecord) error
}

var _ TemplateStore = store.Store(nil)

// TemplateInfo is one version of a job template.
type TemplateInfo struct {
	Project     string
	Name        string
	Version     int
	Description string
	Vars        []jobspec.TemplateVar
	Body        []byte // the document as written
	Hash        string // "sha256:<hex>" of Body
	CreatedBy   string
	CreatedAt   time.Time
}

// Ref is "name@version".
func (t TemplateInfo) Ref() string { return t.Name + "@" + strconv.Itoa(t.Version) }

// templateTarget names a template in audit records and authorization.
func templateTarget(project, name string) string { return "template/" + project + "/" + name }

// templateInfo parses a stored version for its description and variables.
// A stored version was checked when it was created, so a parse failure is
// a server error.
func templateInfo(t store.Template) (TemplateInfo, *jobspec.Template, error) {
	tm, err := jobspec.ParseTemplate(t.Body)
	if err != nil {
		return TemplateInfo{}, nil, fmt.Errorf("stored template %s@%d of project %s no longer parses: %w", t.Name, t.Version, t.Project, err)
	}
	return TemplateInfo{Project: t.Project, Name: t.Name, Version: t.Version, Description: tm.Description, Vars: tm.Vars,
		Body: t.Body, Hash: t.Hash, CreatedBy: t.CreatedBy, CreatedAt: t.CreatedAt}, tm, nil
}

// CreateTemplate stores doc as the next version of template name in
// project ("" means the project the document names, else "default"). The
// document is checked first: variables, references, no credentials, and a
// valid spec with the variables' defaults (docs/templates.md). When doc is
// byte for byte the latest version, nothing is stored and created is false.
func (s *TemplateService) CreateTemplate(ctx context.Context, p Principal, project, name string, doc []byte) (info TemplateInfo, created bool, err error) {
	var errs domain.FieldErrors
	if msg := jobspec.CheckTemplateName(name); msg != "" {
		errs.Add("name", "%s", msg)
	}
	if project != "" && !projectNameRE.MatchString(project) {
		errs.Add("project", "%q is not a valid project name: 1–63 lowercase letters, digits and '-'", project)
	}
	if len(doc) == 0 {
		errs.Add("body", "is empty; send the template document: a job spec with ${var} placeholders and a vars: block")
	}
	if err := errs.Err(); err != nil {
		return TemplateInfo{}, false, err
	}
	tm, err := jobspec.ParseTemplate(doc)
	if err != nil {
		return TemplateInfo{}, false, err
	}
	switch {
	case project == "" && tm.Project != "":
		project = tm.Project
	case project == "":
		project = jobspec.DefaultProject
	case tm.Project != "" && tm.Project != project:
		return TemplateInfo{}, false, domain.FieldErrors{{Path: "project", Message: fmt.Sprintf(
			"the template says project %s but it is being created in project %s; remove project from the template (its jobs run in the template's project) or create it with --project %s",
			tm.Project, project, tm.Project)}}
	}
	if err := tm.Check(project); err != nil {
		return TemplateInfo{}, false, err
	}
	if err := s.authorize(ctx, p, authz.TemplateWrite, authz.Resource{Kind: "template", ID: project + "/" + name, Project: project}); err != nil {
		return TemplateInfo{}, false, err
	}
	hash := jobspec.TemplateHash(doc)
	for range 5 { // another create of the same template may take our version
		latest, err := s.st.GetTemplate(ctx, project, name, 0)
		switch {
		case errors.Is(err, domain.ErrNotFound):
			latest = store.Template{}
		case err != nil:
			return TemplateInfo{}, false, fmt.Errorf("read template %s of project %s: %w", name, project, err)
		case latest.Hash == hash:
			info, _, err := templateInfo(latest)
			return info, false, err
		}
		rec := store.Template{Project: project, Name: name, Version: latest.Version + 1, Body: doc, Hash: hash,
			CreatedBy: p.Actor(), CreatedAt: s.cfg.Clock.Now()}
		var before any
		if latest.Version > 0 {
			before = map[string]any{"version": latest.Version, "hash": latest.Hash}
		}
		actx := s.audited(ctx, p, authz.TemplateWrite, templateTarget(project, name), before,
			map[string]any{"version": rec.Version, "hash": hash})
		err = s.st.PutTemplate(ctx, rec, actx)
		if errors.Is(err, domain.ErrConflict) {
			continue
		}
		if err != nil {
			return TemplateInfo{}, false, fmt.Errorf("store template %s of project %s: %w", name, project, err)
		}
		info := TemplateInfo{Project: project, Name: name, Version: rec.Version, Description: tm.Description, Vars: tm.Vars,
			Body: doc, Hash: hash, CreatedBy: rec.CreatedBy, CreatedAt: rec.CreatedAt}
		return info, true, nil
	}
	return TemplateInfo{}, false, domain.Errorf(domain.ErrConflict, "template %s of project %s kept changing while it was being created; try again", name, project)
}

// ListTemplates returns the latest version of every template of project
// ("" for every project), ordered by project then name, without bodies.
func (s *TemplateService) ListTemplates(ctx context.Context, p Principal, project string) ([]TemplateInfo, error) {
	if project != "" && !projectNameRE.MatchString(project) {
		return nil, domain.FieldErrors{{Path: "project", Message: fmt.Sprintf("%q is not a valid project name: 1–63 lowercase letters, digits and '-'", project)}}
	}
	if err := s.authorize(ctx, p, authz.TemplateRead, authz.Resource{Kind: "template", Project: project}); err != nil {
		return nil, err
	}
	list, err := s.st.ListTemplates(ctx, project)
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	out := make([]TemplateInfo, 0, len(list))
	for _, t := range list {
		info, _, err := templateInfo(t)
		if err != nil {
			return nil, err
		}
		info.Body = nil
		out = append(out, info)
	}
	return out, nil
}

// GetTemplate returns version of template name (0: the latest). project ""
// finds the template in whichever project has one of that name, and is an
// error when several do.
func (s *TemplateService) GetTemplate(ctx context.Context, p Principal, project, name string, version int) (TemplateInfo, error) {
	info, _, err := s.findTemplate(ctx, p, project, name, version)
	return info, err
}

// findTemplate reads a template version and parses it.
func (s *TemplateService) findTemplate(ctx context.Context, p Principal, project, name string, version int) (TemplateInfo, *jobspec.Template, error) {
	var errs domain.FieldErrors
	if msg := jobspec.CheckTemplateName(name); msg != "" {
		errs.Add("template", "%s", msg)
	}
	if project != "" && !projectNameRE.MatchString(project) {
		errs.Add("project", "%q is not a valid project name: 1–63 lowercase letters, digits and '-'", project)
	}
	if version < 0 {
		errs.Add("version", "must be 1 or more (0 or absent: the latest), got %d", version)
	}
	if err := errs.Err(); err != nil {
		return TemplateInfo{}, nil, err
	}
	if err := s.authorize(ctx, p, authz.TemplateRead, authz.Resource{Kind: "template", Project: project}); err != nil {
		return TemplateInfo{}, nil, err
	}
	if project == "" {
		all, err := s.st.ListTemplates(ctx, "")
		if err != nil {
			return TemplateInfo{}, nil, fmt.Errorf("list templates: %w", err)
		}
		var in []string
		for _, t := range all {
			if t.Name == name {
				in = append(in, t.Project)
			}
		}
		switch len(in) {
		case 0:
			return TemplateInfo{}, nil, domain.Errorf(domain.ErrNotFound, "no template is named %s; list templates with: trainyard template ls", name)
		case 1:
			project = in[0]
		default:
			return TemplateInfo{}, nil, domain.FieldErrors{{Path: "project", Message: fmt.Sprintf(
				"is required: template %s exists in projects %s; choose one with --project", name, strings.Join(in, ", "))}}
		}
	}
	t, err := s.st.GetTemplate(ctx, project, name, version)
	if errors.Is(err, domain.ErrNotFound) {
		if version > 0 {
			if latest, lerr := s.st.GetTemplate(ctx, project, name, 0); lerr == nil {
				return TemplateInfo{}, nil, domain.Errorf(domain.ErrNotFound, "template %s of project %s has no version %d; the latest is %d", name, project, version, latest.Version)
			}
		}
		return TemplateInfo{}, nil, domain.Errorf(domain.ErrNotFound, "template %s does not exist in project %s; list templates with: trainyard template ls --project %s", name, project, project)
	}
	if err != nil {
		return TemplateInfo{}, nil, fmt.Errorf("read template %s of project %s: %w", name, project, err)
	}
	return templateInfo(t)
}

// submitSpec loads the spec of a submit request: the document, or the
// template's expansion. A job from a template runs in the template's
// project and carries the label trainyard.template=name@version.
func (s *TemplateService) submitSpec(ctx context.Context, p Principal, in SubmitInput) (domain.Spec, error) {
	if in.Template == "" {
		var errs domain.FieldErrors
		if len(in.Vars) > 0 {
			errs.Add("vars", "are only for a template; name one in template, or put the values in the spec")
		}
		if in.Project != "" {
			errs.Add("project", "selects the template's project and needs template; for a spec set project: in the document or --set project=%s", in.Project)
		}
		if err := errs.Err(); err != nil {
			return domain.Spec{}, err
		}
		spec, err := jobspec.Load(in.Doc, in.Set)
		if err != nil {
			return spec, err
		}
		// Only the platform says a job came from a template; a re-run keeps
		// its original's label as it is.
		switch v, set := spec.Labels[jobspec.TemplateLabel]; {
		case !set || (in.rerunOf != 0 && v == in.rerunTemplate):
		case in.rerunOf != 0 && in.rerunTemplate != "":
			errs.Add("labels."+jobspec.TemplateLabel, "is set by the platform; a re-run keeps its original's %q; remove the --set", in.rerunTemplate)
		default:
			errs.Add("labels."+jobspec.TemplateLabel, "is set by the platform on jobs submitted with --template; remove it from the spec or --set")
		}
		if err := errs.Err(); err != nil {
			return domain.Spec{}, err
		}
		return spec, nil
	}
	if len(in.Doc) > 0 {
		return domain.Spec{}, domain.FieldErrors{{Path: "spec", Message: "and template exclude each other: send a spec document or the name of a template, not both"}}
	}
	name, version, err := jobspec.ParseTemplateRef(in.Template)
	if err != nil {
		return domain.Spec{}, domain.FieldErrors{{Path: "template", Message: err.Error()}}
	}
	info, tm, err := s.findTemplate(ctx, p, in.Project, name, version)
	if err != nil {
		return domain.Spec{}, err
	}
	spec, err := tm.Expand(jobspec.TemplateExpansion{Vars: in.Vars, Sets: in.Set, Project: info.Project})
	if err != nil {
		return domain.Spec{}, err
	}
	var errs domain.FieldErrors
	if spec.Project != info.Project {
		errs.Add("project", "is %s, but template %s belongs to project %s and its jobs run there; to run in %s, create the template there: trainyard template create %s -f FILE --project %s",
			spec.Project, info.Ref(), info.Project, spec.Project, name, spec.Project)
	}
	if _, ok := spec.Labels[jobspec.TemplateLabel]; ok {
		errs.Add("labels."+jobspec.TemplateLabel, "is set by the platform to the template's name@version; remove the --set")
	}
	if err := errs.Err(); err != nil {
		return domain.Spec{}, err
	}
	spec.Labels = maps.Clone(spec.Labels)
	if spec.Labels == nil {
		spec.Labels = map[string]string{}
	}
	spec.Labels[jobspec.TemplateLabel] = info.Ref()
	return spec, nil
}
