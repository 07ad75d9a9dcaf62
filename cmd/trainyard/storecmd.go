package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"trainyard/internal/audit"
	"trainyard/internal/store"
	"trainyard/internal/store/postgres"
	"trainyard/internal/store/sqlite"
)

func storeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Copy, back up and check the metadata store (run with the server stopped, on its machine)",
		Long: `Operate on the metadata store directly, not through a server: move an
embedded SQLite installation to PostgreSQL, take an online backup of a SQLite
store, and verify a store's audit chain. See docs/operator.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(storeCopyCommand(), storeBackupCommand(), storeVerifyCommand())
	return cmd
}

func storeCopyCommand() *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:   "copy --from sqlite:PATH --to postgres://...",
		Short: "Copy an SQLite store into an empty PostgreSQL database",
		Long: `Copy every row of an SQLite store — jobs, attempts, events, artifacts,
checkpoints, alerts, secrets (still sealed under the same master key), users,
tokens and the audit log — into a PostgreSQL database, keeping ids, so the
audit chain stays intact and the CLI's job ids keep working. The target must
hold no data; its schema is created first. The copy ends with a check that
every table holds as many rows as the source and that the audit chain
verifies. Stop the server first; start it again with --store postgres://...
(and the same --data, which holds logs, outputs and the master key).`,
		Example: `  trainyard store copy --from sqlite:$HOME/.local/share/trainyard/trainyard.db --to postgres://trainyard@db:5432/trainyard`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return copyStore(cmd.Context(), cmd.OutOrStdout(), strings.TrimPrefix(from, "sqlite:"), to)
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the SQLite store: sqlite:PATH or PATH (required)")
	cmd.Flags().StringVar(&to, "to", "", "the PostgreSQL database: postgres://... (required)")
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

// copyStore copies the SQLite store at path into the PostgreSQL database dsn.
func copyStore(ctx context.Context, out io.Writer, path, dsn string) error {
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return fmt.Errorf("--to must be a postgres:// URL, got %q", redactDSN(dsn))
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	// Opening brings both schemas to the same version.
	src, err := sqlite.Open(ctx, path)
	if err != nil {
		return err
	}
	src.Close()
	dst, err := postgres.Open(ctx, dsn)
	if err != nil {
		return err
	}
	dst.Close()

	db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(path)+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer db.Close()
	pg, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redactDSN(dsn), err)
	}
	defer pg.Close(context.Background())

	tables, err := sqliteTables(ctx, db)
	if err != nil {
		return err
	}
	for _, t := range tables {
		var n int64
		if err := pg.QueryRow(ctx, "SELECT COUNT(*) FROM "+pgx.Identifier{t}.Sanitize()).Scan(&n); err != nil {
			return fmt.Errorf("count rows of %s in the target: %w", t, err)
		}
		if n > 0 {
			return fmt.Errorf("the target database already holds data (%d rows in %s); copy into an empty database", n, t)
		}
	}
	tx, err := pg.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	var total int64
	for _, t := range tables {
		n, err := copyTable(ctx, db, tx, t)
		if err != nil {
			return fmt.Errorf("copy table %s: %w", t, err)
		}
		total += n
		fmt.Fprintf(out, "%-20s %d rows\n", t, n)
	}
	// Sequences continue after the copied ids.
	seqRows, err := tx.Query(ctx, `SELECT table_name, column_name, pg_get_serial_sequence(quote_ident(table_name), column_name)
		FROM information_schema.columns WHERE table_schema = current_schema() AND column_default LIKE 'nextval(%'`)
	if err != nil {
		return fmt.Errorf("list the id sequences: %w", err)
	}
	type seqCol struct{ table, column, seq string }
	var seqs []seqCol
	for seqRows.Next() {
		var sc seqCol
		if err := seqRows.Scan(&sc.table, &sc.column, &sc.seq); err != nil {
			seqRows.Close()
			return err
		}
		seqs = append(seqs, sc)
	}
	seqRows.Close()
	for _, sc := range seqs {
		t, c := pgx.Identifier{sc.table}.Sanitize(), pgx.Identifier{sc.column}.Sanitize()
		if _, err := tx.Exec(ctx, "SELECT setval($1, GREATEST((SELECT COALESCE(MAX("+c+"), 0) FROM "+t+"), 1), (SELECT COUNT(*) > 0 FROM "+t+"))", sc.seq); err != nil {
			return fmt.Errorf("advance the id sequence of %s: %w", sc.table, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	// Check: row counts, then the audit chain through the store.
	for _, t := range tables {
		var a, b int64
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+quoteSQLite(t)).Scan(&a); err != nil {
			return err
		}
		if err := pg.QueryRow(ctx, "SELECT COUNT(*) FROM "+pgx.Identifier{t}.Sanitize()).Scan(&b); err != nil {
			return err
		}
		if a != b {
			return fmt.Errorf("table %s: %d rows in the source, %d in the target", t, a, b)
		}
	}
	dst, err = postgres.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer dst.Close()
	rep, err := verifyAudit(ctx, dst)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "copied %d rows in %d tables; audit chain intact: %d records, newest %d %s\n", total, len(tables), rep.Records, rep.LastSeq, rep.LastHash)
	return nil
}

// sqliteTables lists the data tables in creation order (parents first).
// settings_rev is not data: each store keeps its own (the target's
// triggers count the copy's writes).
func sqliteTables(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table'
		AND name NOT LIKE 'sqlite_%' AND name NOT IN ('schema_migrations', 'settings_rev') ORDER BY rowid`)
	if err != nil {
		return nil, fmt.Errorf("list the source's tables: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

func quoteSQLite(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

// sqliteOnly names SQLite bookkeeping columns that PostgreSQL keeps its own
// way (jobs.rev, the writer's commit number; PostgreSQL records the writing
// transaction instead), so copy leaves them out.
var sqliteOnly = map[string]map[string]bool{"jobs": {"rev": true}}

// copyTable copies one table's rows with COPY, converting SQLite's values
// to the target column's type.
func copyTable(ctx context.Context, db *sql.DB, tx pgx.Tx, table string) (int64, error) {
	types := map[string]string{}
	rows, err := tx.Query(ctx, `SELECT column_name, data_type FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = $1`, table)
	if err != nil {
		return 0, err
	}
	for rows.Next() {
		var c, t string
		if err := rows.Scan(&c, &t); err != nil {
			rows.Close()
			return 0, err
		}
		types[c] = t
	}
	rows.Close()
	if len(types) == 0 {
		return 0, fmt.Errorf("the target has no table %s; is it at the same schema version?", table)
	}
	probe, err := db.QueryContext(ctx, "SELECT * FROM "+quoteSQLite(table)+" LIMIT 0")
	if err != nil {
		return 0, err
	}
	all, err := probe.Columns()
	probe.Close()
	if err != nil {
		return 0, err
	}
	var cols, quoted []string
	for _, c := range all {
		if sqliteOnly[table][c] {
			continue
		}
		if _, ok := types[c]; !ok {
			return 0, fmt.Errorf("the target's %s has no column %s; is it at the same schema version?", table, c)
		}
		cols, quoted = append(cols, c), append(quoted, quoteSQLite(c))
	}
	src, err := db.QueryContext(ctx, "SELECT "+strings.Join(quoted, ", ")+" FROM "+quoteSQLite(table))
	if err != nil {
		return 0, err
	}
	defer src.Close()
	return tx.CopyFrom(ctx, pgx.Identifier{table}, cols, &rowSource{rows: src, cols: cols, pgTypes: types})
}

// convert maps a value read from SQLite onto the target column's type.
func convert(v any, pgType string) any {
	switch pgType {
	case "boolean":
		if i, ok := v.(int64); ok {
			return i != 0
		}
	case "bytea":
		if s, ok := v.(string); ok {
			return []byte(s)
		}
	case "text", "character varying":
		if b, ok := v.([]byte); ok {
			return string(b)
		}
	}
	return v
}

// rowSource feeds SQLite rows to COPY (pgx.CopyFromSource), converting
// each value to its target column's type.
type rowSource struct {
	rows    *sql.Rows
	cols    []string
	pgTypes map[string]string
	cur     []any
	err     error
}

func (r *rowSource) Next() bool {
	if !r.rows.Next() {
		return false
	}
	vals, ptrs := make([]any, len(r.cols)), make([]any, len(r.cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if r.err = r.rows.Scan(ptrs...); r.err != nil {
		return false
	}
	for i, c := range r.cols {
		vals[i] = convert(vals[i], r.pgTypes[c])
	}
	r.cur = vals
	return true
}

func (r *rowSource) Values() ([]any, error) { return r.cur, nil }

func (r *rowSource) Err() error {
	if r.err != nil {
		return r.err
	}
	return r.rows.Err()
}

func storeBackupCommand() *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:   "backup --from PATH --to FILE",
		Short: "Take a consistent online backup of an SQLite store",
		Long: `Write a consistent copy of an SQLite store to FILE (VACUUM INTO), safe while
the server runs. Restore by stopping the server and putting FILE in the
store's place (or start a server with --store FILE). For PostgreSQL use
pg_dump and pg_restore (docs/operator.md). The backup's audit chain is
verified before the command succeeds.`,
		Example: `  trainyard store backup --from ~/.local/share/trainyard/trainyard.db --to /backups/trainyard-$(date +%F).db`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := os.Stat(to); err == nil {
				return fmt.Errorf("--to %s exists; choose a new file", to)
			}
			db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(from)+"?_pragma=busy_timeout(10000)")
			if err != nil {
				return err
			}
			defer db.Close()
			if _, err := db.ExecContext(cmd.Context(), "VACUUM INTO ?", to); err != nil {
				return fmt.Errorf("back up %s: %w", from, err)
			}
			st, err := sqlite.Open(cmd.Context(), to)
			if err != nil {
				return err
			}
			defer st.Close()
			rep, err := verifyAudit(cmd.Context(), st)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backed up %s to %s; audit chain intact: %d records, newest %d %s\n", from, to, rep.Records, rep.LastSeq, rep.LastHash)
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the SQLite store file (required)")
	cmd.Flags().StringVar(&to, "to", "", "the backup file to write (required; must not exist)")
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func storeVerifyCommand() *cobra.Command {
	var dsn string
	var witnesses []string
	cmd := &cobra.Command{
		Use:   "verify --store PATH|postgres://... [--witness FILE]...",
		Short: "Verify a store's audit chain (after a restore, say)",
		Long: `Walk the store's audit log and check its hash chain. With --witness (the
server's audit_witness file, or copies kept elsewhere) the log must also
still hold the records each witness saw: a log whose newest records were
removed, or rewritten with recomputed hashes, is reported with the record
numbers. See docs/audit.md.`,
		Example: `  trainyard store verify --store ~/.local/share/trainyard/trainyard.db --witness ~/.local/share/trainyard/audit-witness`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var ws []audit.Witness
			for _, path := range witnesses {
				w, err := readWitness(path)
				if err != nil {
					return err
				}
				ws = append(ws, w)
			}
			st, err := openStore(cmd.Context(), dsn)
			if err != nil {
				return err
			}
			defer st.Close()
			rep, err := verifyAudit(cmd.Context(), st, ws...)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "audit chain intact: %d records, newest %d %s\n", rep.Records, rep.LastSeq, rep.LastHash)
			for i, w := range ws {
				fmt.Fprintf(cmd.OutOrStdout(), "matches the witness in %s (record %d)\n", witnesses[i], w.Seq)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dsn, "store", "", "the store: an SQLite file or a postgres:// URL (required)")
	cmd.Flags().StringArrayVar(&witnesses, "witness", nil, "also check against this audit witness file (repeatable)")
	_ = cmd.MarkFlagRequired("store")
	return cmd
}

// readWitness reads an audit witness file for the messages that name it.
func readWitness(path string) (audit.Witness, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return audit.Witness{}, fmt.Errorf("read the audit witness: %w", err)
	}
	w, err := audit.ParseWitness(b)
	if err != nil {
		return audit.Witness{}, fmt.Errorf("%s: %w; give the server's audit_witness file or a copy of it", path, err)
	}
	w.Name = "the witness in " + path
	return w, nil
}

// verifyAudit walks a store's audit chain, checking it against witnesses; a
// break is an error naming it.
func verifyAudit(ctx context.Context, st store.Store, witnesses ...audit.Witness) (audit.Report, error) {
	rep, err := audit.Verify(store.AuditRecords(ctx, st, 0, 1000), witnesses...)
	if err != nil {
		return rep, fmt.Errorf("verify the audit chain: %w", err)
	}
	switch p := rep.Problem; {
	case p == nil:
		return rep, nil
	case p.Kind == audit.Truncated || p.Kind == audit.Rewritten:
		return rep, fmt.Errorf("the audit log no longer holds what its witness saw: %s", p.Message)
	default:
		return rep, fmt.Errorf("the audit chain is broken: %s", p.Message)
	}
}

// redactDSN hides a password in a connection URL.
func redactDSN(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		rest := dsn[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			user := rest[:at]
			if c := strings.IndexByte(user, ':'); c >= 0 {
				user = user[:c] + ":***"
			}
			return dsn[:i+3] + user + rest[at:]
		}
	}
	return dsn
}
