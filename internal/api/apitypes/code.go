package apitypes

// CodeRef names the code package a job runs from (submit --context; see
// docs/code.md): the package's hash and the git state of the tree it was
// built from.
type CodeRef struct {
	// SHA256 is the package's hash, "sha256:<64 hex digits>"; the package
	// must have been uploaded with PUT /api/v1/code/{hash} first.
	SHA256 string `json:"sha256"`
	// Commit is the git commit of the tree; "" when it was not a git tree.
	Commit string `json:"commit,omitempty"`
	// Dirty reports that the tree differed from Commit.
	Dirty bool `json:"dirty,omitempty"`
}

// CodePackage is the answer of PUT /api/v1/code/{hash}.
type CodePackage struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// Created is false when the server already had the package.
	Created bool `json:"created"`
}
