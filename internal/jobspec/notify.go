package jobspec

import (
	"fmt"
	"net/mail"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"trainyard/internal/domain"
	"trainyard/internal/lazyre"
)

// The spec's `notify:` section: whom to tell when the job ends. It names
// admin-configured channels and e-mail addresses only, never a URL; the
// service checks at submit that the channels exist (it knows the server
// config, this package does not).
var notifyFields = []string{"on", "channels", "email"}

// Limits of the notify section.
const (
	MaxNotifyChannels = 10
	MaxNotifyEmails   = 10
	maxEmailLen       = 254 // RFC 5321's path limit
)

// NotifyChannelPattern is the rule for a channel name (as alerts.channels
// names them).
const NotifyChannelPattern = `^[a-z0-9][a-z0-9_-]{0,62}$`

var notifyChannelRE = lazyre.New(NotifyChannelPattern)

// notify decodes the notify section into s.Notify.
func (d *decoder) notify(p string, v *yaml.Node, s *domain.Spec) {
	if v.Kind != yaml.MappingNode {
		d.fail(p, v, "must be a mapping such as {on: [failed], channels: [team-slack], email: [me@example.com]}, got %s", describe(v))
		return
	}
	n := &domain.Notify{}
	d.fields(p, v, notifyFields, func(key, p string, v *yaml.Node) {
		switch key {
		case "on":
			for _, st := range d.strings(p, v, "a list of end states such as [failed, succeeded]") {
				n.On = append(n.On, domain.JobState(st))
			}
		case "channels":
			n.Channels = d.strings(p, v, "a list of channel names such as [team-slack]")
		case "email":
			n.Email = d.strings(p, v, "a list of e-mail addresses such as [me@example.com]")
		}
	})
	s.Notify = n
}

// checkNotify validates the notify section, when there is one.
func checkNotify(es *domain.FieldErrors, n *domain.Notify) {
	if n == nil {
		return
	}
	*es = append(*es, NotifyErrors("notify", *n)...)
}

// NotifyErrors checks a notification setting (a spec's notify section or
// a user's default, whose fields are under prefix) and returns every
// problem. It cannot tell whether the channels exist: the service checks
// that against the server config.
func NotifyErrors(prefix string, n domain.Notify) domain.FieldErrors {
	var es domain.FieldErrors
	at := func(field string) string {
		if prefix == "" {
			return field
		}
		return prefix + "." + field
	}
	states := domain.NotifyStates()
	for i, st := range n.On {
		p := fmt.Sprintf("%s[%d]", at("on"), i)
		switch {
		case !slices.Contains(states, st):
			es.Add(p, "%q is not an end state; use succeeded, failed or canceled", st)
		case slices.Index(n.On, st) < i:
			es.Add(p, "%q is listed twice; keep one", st)
		}
	}
	if len(n.Channels) == 0 && len(n.Email) == 0 {
		p := prefix
		if p == "" {
			p = "channels"
		}
		es.Add(p, "names nobody to notify; add channels (names from the server's alerts.channels) or email addresses")
	}
	if len(n.Channels) > MaxNotifyChannels {
		es.Add(at("channels"), "lists %d channels; at most %d are allowed", len(n.Channels), MaxNotifyChannels)
	}
	for i, c := range n.Channels {
		p := fmt.Sprintf("%s[%d]", at("channels"), i)
		switch {
		case strings.Contains(c, "://"):
			es.Add(p, "is a URL; name a channel the admin configured (alerts.channels in the server config) instead: jobs may not send to addresses of their own")
		case !notifyChannelRE.MatchString(c):
			es.Add(p, "%q is not a channel name; use the name of a channel in the server's alerts.channels, e.g. team-slack", c)
		case slices.Index(n.Channels, c) < i:
			es.Add(p, "%q is listed twice; keep one", c)
		}
	}
	if len(n.Email) > MaxNotifyEmails {
		es.Add(at("email"), "lists %d addresses; at most %d are allowed", len(n.Email), MaxNotifyEmails)
	}
	for i, e := range n.Email {
		p := fmt.Sprintf("%s[%d]", at("email"), i)
		if msg := checkEmail(e); msg != "" {
			es.Add(p, "%s", msg)
		} else if slices.Index(n.Email, e) < i {
			es.Add(p, "%q is listed twice; keep one", e)
		}
	}
	return es
}

// checkEmail returns why e is not a plain e-mail address (local@domain),
// or "".
func checkEmail(e string) string {
	if e == "" {
		return "is empty; give an address such as me@example.com"
	}
	if len(e) > maxEmailLen {
		return fmt.Sprintf("is %d characters long; an e-mail address has at most %d", len(e), maxEmailLen)
	}
	a, err := mail.ParseAddress(e)
	if err != nil || a.Address != e || a.Name != "" || strings.ContainsAny(e, " \t\r\n<>,;\"") {
		return fmt.Sprintf("%q is not a plain e-mail address; write it as local@domain, e.g. me@example.com, without a display name", e)
	}
	if at := strings.LastIndexByte(e, '@'); at < 0 || !strings.Contains(e[at+1:], ".") && e[at+1:] != "localhost" {
		return fmt.Sprintf("%q has no domain with a dot; write it as local@domain, e.g. me@example.com", e)
	}
	return ""
}

// notifySchema is the JSON Schema of the notify section.
func notifySchema() obj {
	var states []string
	for _, s := range domain.NotifyStates() {
		states = append(states, string(s))
	}
	return obj{
		"type":                 "object",
		"additionalProperties": false,
		"description":          "Whom to tell when the job ends: channels the admin configured (alerts.channels) and e-mail addresses (alerts.smtp). Without it, the submitter's default (trainyard notify set) applies.",
		"properties": obj{
			"on": obj{"type": "array", "uniqueItems": true, "items": obj{"enum": states},
				"description": "End states that notify; absent or empty: all of succeeded, failed and canceled."},
			"channels": obj{"type": "array", "uniqueItems": true, "maxItems": MaxNotifyChannels,
				"items": obj{"type": "string", "pattern": NotifyChannelPattern}, "description": "Names of channels in the server's alerts.channels."},
			"email": obj{"type": "array", "uniqueItems": true, "maxItems": MaxNotifyEmails,
				"items": obj{"type": "string", "format": "email", "maxLength": maxEmailLen}, "description": "E-mail addresses (the server needs alerts.smtp)."},
		},
	}
}
