package apitypes

import "time"

// TemplateVar is one variable a job template declares.
type TemplateVar struct {
	Name        string   `json:"name"`
	Default     *string  `json:"default,omitempty"` // absent: the variable is required
	Required    bool     `json:"required,omitempty"`
	Description string   `json:"description,omitempty"`
	Allowed     []string `json:"allowed,omitempty"`
}

// Template is one version of a job template. Lists leave Body empty.
type Template struct {
	Project     string        `json:"project"`
	Name        string        `json:"name"`
	Version     int           `json:"version"`
	Description string        `json:"description,omitempty"`
	Vars        []TemplateVar `json:"vars"`
	Body        string        `json:"body,omitempty"` // the document as written
	Hash        string        `json:"hash"`           // "sha256:<hex>" of Body
	CreatedBy   string        `json:"created_by"`
	CreatedAt   time.Time     `json:"created_at"`
	// Created answers POST /api/v1/templates: false when the body equals
	// the latest version's, which is returned and no version is added.
	Created *bool `json:"created,omitempty"`
}

// TemplateList is the answer of GET /api/v1/templates.
type TemplateList struct {
	Templates []Template `json:"templates"`
}

// CreateTemplate is the body of POST /api/v1/templates.
type CreateTemplate struct {
	Name    string `json:"name"`
	Project string `json:"project,omitempty"` // default: the body's project, else "default"
	Body    string `json:"body"`              // the template document (YAML or JSON)
}
