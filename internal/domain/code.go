package domain

// CodeRef names the code package a job runs from (submit --context): a
// content-addressed archive of the submitter's source tree, unpacked as each
// attempt's working directory.
type CodeRef struct {
	// SHA256 is the package's hash, "sha256:<64 hex digits>".
	SHA256 string
	// Commit is the git commit the tree was checked out at; "" when the
	// tree was not a git work tree.
	Commit string
	// Dirty reports that the tree differed from Commit when it was
	// packaged (modified, staged or untracked files).
	Dirty bool
}
