package codepkg

import (
	"bufio"
	"bytes"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// pattern is one line of an ignore file.
type pattern struct {
	segs    []string // slash-separated parts; "**" matches any number of parts
	negate  bool     // "!pattern": re-include
	dirOnly bool     // "pattern/": directories only
}

// ignoreFile is the patterns of one ignore file, relative to its directory.
type ignoreFile struct {
	base     string // directory of the file, relative to the tree root ("" for the root)
	patterns []pattern
}

// parseIgnore parses ignore-file text in .gitignore syntax: blank lines and
// lines starting with "#" are skipped; "\#" and "\!" escape a leading "#"
// or "!"; trailing spaces are dropped unless escaped; "!" negates; a
// trailing "/" matches directories only; a "/" at the start or in the middle
// anchors the pattern to the file's directory, otherwise it matches a name
// at any depth; "**" matches any number of directories.
func parseIgnore(data []byte) []pattern {
	var out []pattern
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		line = trimTrailingSpaces(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var p pattern
		switch {
		case strings.HasPrefix(line, "!"):
			p.negate = true
			line = line[1:]
		case strings.HasPrefix(line, `\!`), strings.HasPrefix(line, `\#`):
			line = line[1:]
		}
		if strings.HasSuffix(line, "/") {
			p.dirOnly = true
			line = strings.TrimRight(line, "/")
		}
		if line == "" {
			continue
		}
		anchored := strings.Contains(line, "/")
		line = strings.TrimPrefix(line, "/")
		for _, s := range strings.Split(line, "/") {
			if s == "" {
				continue // "a//b" is "a/b"
			}
			if s != "**" {
				s = strings.ReplaceAll(s, "[!", "[^") // fnmatch negation → path.Match's
			}
			p.segs = append(p.segs, s)
		}
		if len(p.segs) == 0 {
			continue
		}
		if !anchored {
			p.segs = append([]string{"**"}, p.segs...)
		}
		out = append(out, p)
	}
	return out
}

// trimTrailingSpaces drops trailing spaces that are not escaped with "\".
func trimTrailingSpaces(s string) string {
	for strings.HasSuffix(s, " ") && !strings.HasSuffix(s, `\ `) {
		s = s[:len(s)-1]
	}
	if strings.HasSuffix(s, `\ `) {
		s = s[:len(s)-2] + " "
	}
	return s
}

// match reports whether the pattern matches rel (slash-separated, relative
// to the ignore file's directory).
func (p pattern) match(rel string, isDir bool) bool {
	if p.dirOnly && !isDir {
		return false
	}
	return matchSegs(p.segs, strings.Split(rel, "/"))
}

// matchSegs matches pattern parts against path parts; "**" matches zero or
// more whole parts.
func matchSegs(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			rest := pat[1:]
			if len(rest) == 0 {
				return len(name) > 0 // "a/**" matches what is inside a, not a itself
			}
			for i := 0; i <= len(name); i++ {
				if matchSegs(rest, name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		ok, err := path.Match(pat[0], name[0])
		if err != nil || !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// ignorer holds the ignore files that apply at one point of the walk.
type ignorer struct {
	git []ignoreFile // .gitignore files (and .git/info/exclude), shallowest first
	ty  []ignoreFile // .trainyardignore files, shallowest first
}

// ignored reports whether rel (relative to the tree root) is excluded. Later
// rules win: .gitignore files from the root down, then .trainyardignore files
// from the root down, so a .trainyardignore can both exclude more and
// re-include ("!name") what git ignores.
func (ig *ignorer) ignored(rel string, isDir bool) bool {
	ignored := false
	for _, set := range [][]ignoreFile{ig.git, ig.ty} {
		for _, f := range set {
			sub := rel
			if f.base != "" {
				var ok bool
				if sub, ok = strings.CutPrefix(rel, f.base+"/"); !ok {
					continue
				}
			}
			for _, p := range f.patterns {
				if p.match(sub, isDir) {
					ignored = !p.negate
				}
			}
		}
	}
	return ignored
}

// enter returns the ignorer for the directory rel, adding the ignore files
// found in it (absolute path abs).
func (ig *ignorer) enter(abs, rel string) (*ignorer, error) {
	next := ig
	for _, name := range []string{".gitignore", ignoreFileName} {
		data, err := os.ReadFile(filepath.Join(abs, name))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			if isDirErr(abs, name) {
				continue
			}
			return nil, err
		}
		ps := parseIgnore(data)
		if len(ps) == 0 {
			continue
		}
		if next == ig {
			next = &ignorer{git: ig.git, ty: ig.ty}
		}
		f := ignoreFile{base: rel, patterns: ps}
		if name == ".gitignore" {
			next.git = append(next.git[:len(next.git):len(next.git)], f)
		} else {
			next.ty = append(next.ty[:len(next.ty):len(next.ty)], f)
		}
	}
	return next, nil
}

// isDirErr reports whether abs/name is a directory (an odd but harmless
// ".gitignore" directory is not an ignore file).
func isDirErr(abs, name string) bool {
	st, err := os.Stat(filepath.Join(abs, name))
	return err == nil && st.IsDir()
}
