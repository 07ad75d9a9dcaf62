// Package s3 stores blobs in a bucket of an S3-compatible service through
// minio-go. A key "a/b" is the object PREFIX+"a/b".
//
// Put knows each object's SHA-256 before it uploads, so it can store it as
// user metadata ("x-amz-meta-sha256") in the same request: readers that can
// seek (files, bytes.Reader) are hashed in a first pass and then uploaded;
// other readers are buffered in memory (up to 8 MiB of declared size) or
// spooled to a temporary file in Config.SpoolDir. The upload is a single PUT
// or, above Config.PartSize, a multipart upload; either way S3 makes the
// object visible only once it is complete, so writes are atomic.
//
// Credentials never appear in errors: messages from the service are scrubbed
// of the access and secret keys, and Config's String method hides them.
package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"trainyard/internal/blob"
)

// DefaultPartSize is the multipart part size used when Config.PartSize is 0.
const DefaultPartSize = 16 << 20

// memLimit is the largest declared size that Put buffers in memory instead
// of spooling to disk.
const memLimit = 8 << 20

const shaMeta = "Sha256" // user metadata name, sent as x-amz-meta-sha256

// Config says where the bucket is and how to reach it.
type Config struct {
	// Endpoint is the service's host[:port], without scheme.
	Endpoint string
	// TLS selects https (true) or http (false).
	TLS bool
	// Region is the bucket's region; "" lets the client discover it
	// (us-east-1 for most S3-compatible servers).
	Region string
	// Bucket holds the objects.
	Bucket string
	// Prefix is prepended to every key, e.g. "trainyard/"; it should end in
	// "/" or be empty.
	Prefix string
	// AccessKey and SecretKey are the static credentials.
	AccessKey, SecretKey string
	// CreateBucket makes New create the bucket when it does not exist.
	CreateBucket bool
	// PartSize is the multipart part size in bytes; 0 means DefaultPartSize.
	// Objects larger than it are uploaded in parts.
	PartSize uint64
	// SpoolDir holds the temporary files of Puts from readers that cannot
	// seek; "" means os.TempDir().
	SpoolDir string
}

// String describes the configuration without its credentials.
func (c Config) String() string {
	scheme := "http"
	if c.TLS {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s/%s/%s (region %q, credentials hidden)", scheme, c.Endpoint, c.Bucket, c.Prefix, c.Region)
}

// GoString hides the credentials from %#v as well.
func (c Config) GoString() string { return "s3.Config{" + c.String() + "}" }

// ParseURL reads a configuration from a URL of the form
//
//	http[s]://ACCESS_KEY:SECRET_KEY@HOST:PORT/BUCKET[/PREFIX/][?region=REGION&create=true]
//
// https turns TLS on. Credentials with reserved characters must be
// percent-encoded. PREFIX, when given, gets a trailing "/" if it lacks one.
func ParseURL(s string) (Config, error) {
	u, err := url.Parse(s)
	if err != nil {
		// url's errors quote the input, secret included: say only where.
		return Config{}, errors.New("parse S3 URL: malformed; want http[s]://ACCESS_KEY:SECRET_KEY@HOST:PORT/BUCKET[/PREFIX]")
	}
	var c Config
	switch u.Scheme {
	case "http":
	case "https":
		c.TLS = true
	default:
		return Config{}, fmt.Errorf("parse S3 URL: scheme %q is not http or https", u.Scheme)
	}
	if u.Host == "" {
		return Config{}, errors.New("parse S3 URL: no host; want http[s]://ACCESS_KEY:SECRET_KEY@HOST:PORT/BUCKET")
	}
	c.Endpoint = u.Host
	if u.User != nil {
		c.AccessKey = u.User.Username()
		c.SecretKey, _ = u.User.Password()
	}
	if c.AccessKey == "" || c.SecretKey == "" {
		return Config{}, errors.New("parse S3 URL: access key or secret key missing; put them before the host as ACCESS_KEY:SECRET_KEY@")
	}
	bucket, prefix, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	if bucket == "" {
		return Config{}, errors.New("parse S3 URL: no bucket; put it as the first path segment")
	}
	c.Bucket = bucket
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	c.Prefix = prefix
	q := u.Query()
	c.Region = q.Get("region")
	c.CreateBucket = q.Get("create") == "true"
	return c, nil
}

// Store is a blob.Store on an S3 bucket.
type Store struct {
	cfg    Config
	client *minio.Client
	core   minio.Core
}

var _ blob.Store = (*Store)(nil)

// New connects to the bucket described by cfg, creating it when
// cfg.CreateBucket is set, and checks that it exists.
func New(ctx context.Context, cfg Config) (*Store, error) {
	switch {
	case cfg.Endpoint == "":
		return nil, errors.New("s3 blob store: Endpoint is empty; set it to the service's host:port")
	case cfg.Bucket == "":
		return nil, errors.New("s3 blob store: Bucket is empty; name the bucket that holds the blobs")
	case cfg.AccessKey == "" || cfg.SecretKey == "":
		return nil, errors.New("s3 blob store: AccessKey or SecretKey is empty; both are required")
	}
	if len(cfg.Prefix) > 1024-blob.MaxKeyLen {
		return nil, fmt.Errorf("s3 blob store: Prefix is %d bytes long; at most %d fit beside the longest key in S3's 1024-byte object names", len(cfg.Prefix), 1024-blob.MaxKeyLen)
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = DefaultPartSize
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:       cfg.TLS,
		Region:       cfg.Region,
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 blob store %s: %w", cfg, scrub(cfg, err))
	}
	s := &Store{cfg: cfg, client: client, core: minio.Core{Client: client}}
	ok, err := client.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("s3 blob store %s: check bucket: %w; check the endpoint and credentials", cfg, scrub(cfg, err))
	}
	if !ok {
		if !cfg.CreateBucket {
			return nil, fmt.Errorf("s3 blob store %s: bucket %q does not exist; create it or set CreateBucket", cfg, cfg.Bucket)
		}
		err := client.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region})
		if code := minio.ToErrorResponse(err).Code; err != nil && code != "BucketAlreadyOwnedByYou" && code != "BucketAlreadyExists" {
			return nil, fmt.Errorf("s3 blob store %s: create bucket: %w", cfg, scrub(cfg, err))
		}
	}
	return s, nil
}

// Config returns the store's configuration.
func (s *Store) Config() Config { return s.cfg }

func (s *Store) name(key string) string { return s.cfg.Prefix + key }

// interpret maps the client's errors to the blob sentinels and scrubs them.
func (s *Store) interpret(op, key string, err error) error {
	resp := minio.ToErrorResponse(err)
	switch {
	case resp.Code == "NoSuchKey" || (resp.StatusCode == http.StatusNotFound && resp.Code != "NoSuchBucket"):
		return blob.NotFound(key)
	case resp.Code == "NoSuchBucket":
		return fmt.Errorf("%s blob %q: bucket %q does not exist; create it or set CreateBucket", op, key, s.cfg.Bucket)
	}
	return fmt.Errorf("%s blob %q: %w", op, key, scrub(s.cfg, err))
}

// Put implements blob.Store.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) (blob.Info, error) {
	if err := blob.ValidateKey(key); err != nil {
		return blob.Info{}, err
	}
	if size < -1 {
		return blob.Info{}, fmt.Errorf("put blob %q: size %d is invalid; pass the byte count or -1 when unknown", key, size)
	}
	hr := blob.NewHashingReader(ctx, key, r, size)
	var body io.Reader
	switch rs, ok := r.(io.ReadSeeker); {
	case ok:
		start, err := rs.Seek(0, io.SeekCurrent)
		if err == nil {
			if _, err = io.Copy(io.Discard, hr); err != nil {
				return blob.Info{}, fmt.Errorf("put blob %q: %w", key, err)
			}
			_, err = rs.Seek(start, io.SeekStart)
		}
		if err != nil {
			return blob.Info{}, fmt.Errorf("put blob %q: rewind reader: %w", key, err)
		}
		if ra, ok := r.(io.ReaderAt); ok {
			body = io.NewSectionReader(ra, start, hr.N())
		} else {
			body = io.LimitReader(rs, hr.N())
		}
	case size >= 0 && size <= memLimit:
		var buf bytes.Buffer
		buf.Grow(int(size))
		if _, err := buf.ReadFrom(hr); err != nil {
			return blob.Info{}, fmt.Errorf("put blob %q: %w", key, err)
		}
		body = bytes.NewReader(buf.Bytes())
	default:
		f, err := os.CreateTemp(s.cfg.SpoolDir, "trainyard-blob-*")
		if err != nil {
			return blob.Info{}, fmt.Errorf("put blob %q: create spool file: %w; set SpoolDir to a writable directory", key, err)
		}
		defer func() {
			f.Close()
			os.Remove(f.Name())
		}()
		if _, err := io.Copy(f, hr); err != nil {
			return blob.Info{}, fmt.Errorf("put blob %q: spool: %w", key, err)
		}
		body = io.NewSectionReader(f, 0, hr.N())
	}
	sum := hr.SHA256()
	up, err := s.client.PutObject(ctx, s.cfg.Bucket, s.name(key), body, hr.N(), minio.PutObjectOptions{
		UserMetadata: map[string]string{shaMeta: sum},
		ContentType:  "application/octet-stream",
		PartSize:     s.cfg.PartSize,
	})
	if err != nil {
		return blob.Info{}, s.interpret("put", key, err)
	}
	info := blob.Info{Key: key, Size: hr.N(), SHA256: sum, ModTime: up.LastModified}
	if info.ModTime.IsZero() {
		// PUT responses carry no Last-Modified; ask once.
		st, err := s.Stat(ctx, key)
		if err != nil {
			return blob.Info{}, err
		}
		info.ModTime = st.ModTime
	}
	return info, nil
}

func (s *Store) info(key string, oi minio.ObjectInfo) blob.Info {
	sum := oi.Metadata.Get("X-Amz-Meta-" + shaMeta)
	if sum == "" {
		for k, v := range oi.UserMetadata {
			if strings.EqualFold(k, shaMeta) {
				sum = v
			}
		}
	}
	return blob.Info{Key: key, Size: oi.Size, SHA256: strings.ToLower(sum), ModTime: oi.LastModified}
}

// Get implements blob.Store. The object is read with one GET, so a
// concurrent overwrite never mixes two versions.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, blob.Info, error) {
	if err := blob.ValidateKey(key); err != nil {
		return nil, blob.Info{}, err
	}
	body, oi, _, err := s.core.GetObject(ctx, s.cfg.Bucket, s.name(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, blob.Info{}, s.interpret("get", key, err)
	}
	return &object{body: body, s: s, key: key}, s.info(key, oi), nil
}

// GetRange implements blob.Store with one ranged GET; only a range that
// starts at or past the end costs a second request (a HEAD) to tell the two
// apart.
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, blob.Info, error) {
	if err := blob.ValidateKey(key); err != nil {
		return nil, blob.Info{}, err
	}
	if _, err := blob.CheckRange(key, offset, offset, length); err != nil {
		return nil, blob.Info{}, err // negative offset or length
	}
	empty := func() (io.ReadCloser, blob.Info, error) {
		info, err := s.Stat(ctx, key)
		if err != nil {
			return nil, blob.Info{}, err
		}
		if _, err := blob.CheckRange(key, info.Size, offset, length); err != nil {
			return nil, blob.Info{}, err
		}
		return io.NopCloser(bytes.NewReader(nil)), info, nil
	}
	if length == 0 {
		return empty()
	}
	var opts minio.GetObjectOptions
	if length < 0 {
		opts.Set("Range", fmt.Sprintf("bytes=%d-", offset))
	} else {
		opts.Set("Range", fmt.Sprintf("bytes=%d-%d", offset, offset+length-1))
	}
	body, oi, h, err := s.core.GetObject(ctx, s.cfg.Bucket, s.name(key), opts)
	if err != nil {
		if resp := minio.ToErrorResponse(err); resp.Code == "InvalidRange" || resp.StatusCode == http.StatusRequestedRangeNotSatisfiable {
			return empty()
		}
		return nil, blob.Info{}, s.interpret("get", key, err)
	}
	info := s.info(key, oi)
	// Content-Length is the range's; Content-Range ("bytes 0-9/1000") has
	// the object's size.
	if _, total, ok := strings.Cut(h.Get("Content-Range"), "/"); ok {
		if n, err := strconv.ParseInt(total, 10, 64); err == nil {
			info.Size = n
		}
	}
	return &object{body: body, s: s, key: key}, info, nil
}

// object maps and scrubs the errors of a streaming read.
type object struct {
	body io.ReadCloser
	s    *Store
	key  string
}

func (o *object) Read(p []byte) (int, error) {
	n, err := o.body.Read(p)
	if err != nil && err != io.EOF {
		err = o.s.interpret("read", o.key, err)
	}
	return n, err
}

func (o *object) Close() error { return o.body.Close() }

// Stat implements blob.Store.
func (s *Store) Stat(ctx context.Context, key string) (blob.Info, error) {
	if err := blob.ValidateKey(key); err != nil {
		return blob.Info{}, err
	}
	oi, err := s.client.StatObject(ctx, s.cfg.Bucket, s.name(key), minio.StatObjectOptions{})
	if err != nil {
		return blob.Info{}, s.interpret("stat", key, err)
	}
	return s.info(key, oi), nil
}

// Delete implements blob.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := blob.ValidateKey(key); err != nil {
		return err
	}
	err := s.client.RemoveObject(ctx, s.cfg.Bucket, s.name(key), minio.RemoveObjectOptions{})
	if err != nil {
		if errors.Is(s.interpret("delete", key, err), blob.ErrNotFound) {
			return nil
		}
		return s.interpret("delete", key, err)
	}
	return nil
}

// List implements blob.Store. S3 lists keys in ascending UTF-8 byte order,
// which is the order blob.Store promises.
func (s *Store) List(ctx context.Context, prefix string) iter.Seq2[blob.Info, error] {
	return func(yield func(blob.Info, error) bool) {
		if err := blob.ValidatePrefix(prefix); err != nil {
			yield(blob.Info{}, err)
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		opts := minio.ListObjectsOptions{Prefix: s.name(prefix), Recursive: true}
		for oi := range s.client.ListObjectsIter(ctx, s.cfg.Bucket, opts) {
			if oi.Err != nil {
				yield(blob.Info{}, fmt.Errorf("list blobs with prefix %q: %w", prefix, scrub(s.cfg, oi.Err)))
				return
			}
			key := strings.TrimPrefix(oi.Key, s.cfg.Prefix)
			if blob.ValidateKey(key) != nil {
				continue // not written through this package
			}
			if !yield(blob.Info{Key: key, Size: oi.Size, ModTime: oi.LastModified}, nil) {
				return
			}
		}
	}
}

// scrubbedError hides the credentials in an error's text while keeping the
// error itself reachable through errors.Is and errors.As.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

func scrub(cfg Config, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, secret := range []string{cfg.SecretKey, url.QueryEscape(cfg.SecretKey), cfg.AccessKey} {
		if secret != "" {
			msg = strings.ReplaceAll(msg, secret, "[REDACTED]")
		}
	}
	return &scrubbedError{msg: msg, err: err}
}
