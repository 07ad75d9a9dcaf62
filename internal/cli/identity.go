package cli

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
)

func (a *app) userCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "user",
		Short: "Create and list users",
		Long: `A user holds roles and tokens. Global roles: admin (everything),
resource-admin (pools, quotas, projects, approvals; reads jobs), auditor (reads
everything, changes nothing). Project roles: lead (every job and member of the
project), member (submits; sees and manages own jobs), viewer (reads the
project's jobs). See docs/security.md.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	create := &cobra.Command{
		Use:     "create NAME",
		Short:   "Create a user (no roles yet)",
		Example: "  trainyard user create researcher-a\n  trainyard role grant researcher-a member --project vision",
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			u, err := c.CreateUser(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "created user %s; grant a role with: trainyard role grant %s ROLE [--project P]\n", oneLine(u.Name), oneLine(u.Name))
			return err
		},
	}
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List users with their roles",
		Args:    exactArgs(0),
	}
	output, checkOutput := outputFlag(ls)
	ls.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		users, err := c.ListUsers(cmd.Context())
		if err != nil {
			return err
		}
		if users == nil {
			users = []apitypes.User{}
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, apitypes.UserList{Users: users}); ok {
			return err
		}
		now := a.env.now()
		tw := newTable(out)
		fmt.Fprintln(tw, "NAME\tROLES\tAGE")
		for _, u := range users {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", cell(u.Name), cell(roleList(u.Roles)), age(now, u.CreatedAt))
		}
		return tw.Flush()
	}
	cmd.AddCommand(create, ls)
	return cmd
}

// roleList renders roles as "admin, member@vision".
func roleList(bs []apitypes.RoleBinding) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = b.Role
		if b.Project != "" {
			parts[i] += "@" + b.Project
		}
	}
	return strings.Join(parts, ", ")
}

func (a *app) roleCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "role",
		Short: "Grant and revoke roles",
		Long: `Grant or revoke a role. Global roles (admin, resource-admin, auditor) take no
--project and need admin; project roles (lead, member, viewer) need --project
and may be granted by admins and by the project's leads.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	for _, grant := range []bool{true, false} {
		var project string
		use, short, verb := "grant USER ROLE", "Give a user a role", "granted"
		if !grant {
			use, short, verb = "revoke USER ROLE", "Take a role away from a user (effective on their next request)", "revoked"
		}
		sub := &cobra.Command{
			Use:     use,
			Short:   short,
			Example: "  trainyard role " + strings.Fields(use)[0] + " researcher-a member --project vision",
			Args:    exactArgs(2),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := a.client()
				if err != nil {
					return err
				}
				b := apitypes.RoleBinding{Role: args[1], Project: project}
				var ch apitypes.RoleChange
				if grant {
					ch, err = c.GrantRole(cmd.Context(), args[0], b)
				} else {
					ch, err = c.RevokeRole(cmd.Context(), args[0], b)
				}
				if err != nil {
					return err
				}
				what := roleList([]apitypes.RoleBinding{b})
				if !ch.Changed {
					_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s already holds %s\n", args[0], what)
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s\n", verb, args[0], what)
				return err
			},
		}
		sub.Flags().StringVar(&project, "project", "", "the project of a project role (lead, member, viewer)")
		cmd.AddCommand(sub)
	}
	return cmd
}

func (a *app) tokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create, list and revoke API tokens",
		Long: `Tokens authenticate API calls and act as their user. A token is shown once
when created and stored only hashed; revoking one stops it at once.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	var user, name, expires string
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a token (shown once)",
		Example: `  trainyard token create --name laptop --expires 30d
  trainyard token create --user researcher-a -o json`,
		Args: exactArgs(0),
	}
	create.Flags().StringVar(&user, "user", "", "the user the token acts as (default: you; others need admin)")
	create.Flags().StringVar(&name, "name", "", "a label for the token (default cli)")
	create.Flags().StringVar(&expires, "expires", "90d", "lifetime: days (30d), a duration (12h) or never")
	output, checkOutput := outputFlag(create)
	create.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(); err != nil {
			return err
		}
		if _, err := domain.ParseTTL(expires); err != nil {
			return usageErrorf("invalid --expires: %v", err)
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		t, err := c.CreateToken(cmd.Context(), apitypes.TokenRequest{User: user, Name: name, Expires: expires})
		if err != nil {
			return err
		}
		if ok, err := writeStructured(cmd.OutOrStdout(), *output, t); ok {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "created token %d (%s) for %s, expires %s; it is shown only this once:\n",
			t.ID, oneLine(t.Name), oneLine(t.User), expiryText(t.ExpiresAt))
		_, err = fmt.Fprintln(cmd.OutOrStdout(), t.Token)
		return err
	}
	var lsUser string
	var lsAll bool
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List tokens (yours by default)",
		Args:    exactArgs(0),
	}
	ls.Flags().StringVar(&lsUser, "user", "", "list this user's tokens (admins and auditors)")
	ls.Flags().BoolVar(&lsAll, "all", false, "list every user's tokens (admins and auditors)")
	lsOut, lsCheck := outputFlag(ls)
	ls.RunE = func(cmd *cobra.Command, args []string) error {
		if err := lsCheck(); err != nil {
			return err
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		toks, err := c.ListTokens(cmd.Context(), lsUser, lsAll)
		if err != nil {
			return err
		}
		if toks == nil {
			toks = []apitypes.Token{}
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *lsOut, apitypes.TokenList{Tokens: toks}); ok {
			return err
		}
		now := a.env.now()
		tw := newTable(out)
		fmt.Fprintln(tw, "ID\tNAME\tUSER\tAGE\tEXPIRES\tSTATUS")
		for _, t := range toks {
			status := "active"
			switch {
			case t.RevokedAt != nil:
				status = "revoked"
			case t.ExpiresAt != nil && !now.Before(*t.ExpiresAt):
				status = "expired"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", t.ID, cell(t.Name), cell(t.User), age(now, t.CreatedAt),
				expiryText(t.ExpiresAt), status)
		}
		return tw.Flush()
	}
	revoke := &cobra.Command{
		Use:     "revoke ID",
		Short:   "Revoke a token; it stops working at once",
		Example: "  trainyard token revoke 12",
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id <= 0 {
				return usageErrorf("invalid token id %q: want a positive integer from 'trainyard token ls'", args[0])
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			t, err := c.RevokeToken(cmd.Context(), id)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "revoked token %d (%s) of %s\n", t.ID, oneLine(t.Name), oneLine(t.User))
			return err
		},
	}
	cmd.AddCommand(create, ls, revoke)
	return cmd
}

// expiryText renders a token's expiry; nil is "never".
func expiryText(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return t.UTC().Format("2006-01-02 15:04 UTC")
}

func (a *app) whoamiCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "whoami",
		Short: "Show who your token acts as, and its roles",
		Args:  exactArgs(0),
	}
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		w, err := c.Whoami(cmd.Context())
		if err != nil {
			return err
		}
		if ok, err := writeStructured(cmd.OutOrStdout(), *output, w); ok {
			return err
		}
		return printWhoami(cmd.OutOrStdout(), w)
	}
	return cmd
}

func printWhoami(out io.Writer, w apitypes.Whoami) error {
	if w.Job != 0 {
		_, err := fmt.Fprintf(out, "job token of attempt %d of job %d\n", w.Attempt, w.Job)
		return err
	}
	user, roles := oneLine(w.User), oneLine(roleList(w.Roles))
	if roles == "" {
		roles = "none (ask an admin: trainyard role grant " + user + " ROLE --project P)"
	}
	_, err := fmt.Fprintf(out, "user:    %s\nroles:   %s\ntoken:   %d (%s), expires %s\n", user, roles, w.TokenID, cell(w.TokenName), expiryText(w.ExpiresAt))
	return err
}

func (a *app) loginCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Save a server URL and token in the config file",
		Long: `Read a token (from --token, else the first line of stdin), check it with the
server, and save the server URL and the token in the config file
($XDG_CONFIG_HOME/trainyard/config.yaml, mode 0600).`,
		Example: `  trainyard login --server https://trainyard.example.com < token.txt
  echo "$TOKEN" | trainyard login`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.flags.token == "" {
				line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
				if err != nil && err != io.EOF {
					return fmt.Errorf("read the token from stdin: %w", err)
				}
				a.flags.token = strings.TrimSpace(line)
			}
			if a.flags.token == "" {
				return usageErrorf("no token given: pass --token or write it on stdin")
			}
			cfg, err := a.resolveConfig()
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			w, err := c.Whoami(cmd.Context())
			if err != nil {
				return err
			}
			path := configPath(a.env.getenv)
			if err := WriteConfig(path, cfg.Server, a.flags.token, ""); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "saved server %s and the token to %s\n", cfg.Server, path)
			return printWhoami(cmd.OutOrStdout(), w)
		},
	}
	return cmd
}
