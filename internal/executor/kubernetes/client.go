package kubernetes

import (
	"context"
	"io"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// client is what the executor asks of the API server, through one REST
// client per API group it uses (core/v1 and batch/v1) and a scheme of
// those two groups alone. client-go's clientset and informer factory
// register every API group's types when the process starts (15 ms and
// 20 MB more in every process that links them, the CLI's included);
// these do not.
type client struct {
	core, batch rest.Interface
	params      runtime.ParameterCodec
}

func newClient(cfg *rest.Config, compress bool) (*client, error) {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := batchv1.AddToScheme(s); err != nil {
		return nil, err
	}
	codecs := serializer.NewCodecFactory(s)
	group := func(gv schema.GroupVersion, path string) (rest.Interface, error) {
		c := rest.CopyConfig(cfg)
		c.GroupVersion, c.APIPath = &gv, path
		c.NegotiatedSerializer = codecs.WithoutConversion()
		// Protocol buffers rather than JSON, both ways: a third of the
		// API server's and our decoding per object, on every watch event.
		c.ContentType = runtime.ContentTypeProtobuf
		c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
		c.DisableCompression = !compress // see Config.Compress
		if c.UserAgent == "" {
			c.UserAgent = "trainyard"
		}
		return rest.RESTClientFor(c)
	}
	core, err := group(corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return nil, err
	}
	batch, err := group(batchv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, err
	}
	return &client{core: core, batch: batch, params: runtime.NewParameterCodec(s)}, nil
}

// kind names a kind of object: its group's client and its plural.
type kind struct {
	c      rest.Interface
	plural string
}

func (c *client) jobs() kind     { return kind{c.batch, "jobs"} }
func (c *client) pods() kind     { return kind{c.core, "pods"} }
func (c *client) services() kind { return kind{c.core, "services"} }
func (c *client) secrets() kind  { return kind{c.core, "secrets"} }
func (c *client) nodes() kind    { return kind{c.core, "nodes"} }

func (c *client) create(ctx context.Context, r kind, ns string, obj runtime.Object) error {
	return r.c.Post().Namespace(ns).Resource(r.plural).Body(obj).Do(ctx).Error()
}

// exists reports whether the object name of kind r is on the API server.
func (c *client) exists(ctx context.Context, r kind, ns, name string) (bool, error) {
	err := r.c.Get().Namespace(ns).Resource(r.plural).Name(name).Do(ctx).Error()
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

func (c *client) delete(ctx context.Context, r kind, ns, name string, opts metav1.DeleteOptions) error {
	return r.c.Delete().Namespace(ns).Resource(r.plural).Name(name).Body(&opts).Do(ctx).Error()
}

// podLog streams a pod's log.
func (c *client) podLog(ctx context.Context, ns, pod string, opts *corev1.PodLogOptions) (io.ReadCloser, error) {
	return c.core.Get().Namespace(ns).Resource("pods").Name(pod).SubResource("log").
		VersionedParams(opts, c.params).Stream(ctx)
}

// informer watches the objects of r in namespace ns (all namespaces when
// empty) that selector picks, into a cache indexed by indexers.
func (c *client) informer(r kind, ns, selector string, example, list runtime.Object, indexers cache.Indexers) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			out := list.DeepCopyObject()
			err := r.c.Get().Namespace(ns).Resource(r.plural).VersionedParams(&o, c.params).Do(ctx).Into(out)
			return out, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			o.Watch = true
			return r.c.Get().Namespace(ns).Resource(r.plural).VersionedParams(&o, c.params).Watch(ctx)
		},
	}
	return cache.NewSharedIndexInformer(lw, example, 0, indexers)
}
