package tenant

import (
	"context"
	"fmt"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// Images of tenants. An image without a tenant is the operator's: every
// tenant sees it and builds on it, none replaces or deletes it. A
// tenant's image is its own: another tenant does not list it, build on
// it or delete it, and is answered as for an image that does not exist.
// A tenant's images count against its max_images and, with its
// snapshots and workspaces, its max_disk_mib.

// CreateImage implements sandbox.Manager: the image is the caller's
// tenant's, whatever the request said; a recipe's base must be an image
// the caller sees; the tenant's image and disk caps are checked first,
// and an image being made counts until it is made.
func (m *Manager) CreateImage(ctx context.Context, req sandbox.ImageRequest, progress func(sandbox.ImageEvent)) (sandbox.ImageInfo, error) {
	c, err := caller(ctx)
	if err != nil {
		return sandbox.ImageInfo{}, err
	}
	if all(c) {
		if req.Tenant != "" {
			if err := sandbox.CheckTenantName(req.Tenant); err != nil {
				return sandbox.ImageInfo{}, err
			}
		}
		return m.inner.CreateImage(ctx, req, progress)
	}
	req.Tenant = sandbox.Owner(c.Tenant)
	if err := req.Validate(); err != nil {
		return sandbox.ImageInfo{}, err
	}
	release, err := m.admitImage(ctx, c, req)
	if err != nil {
		return sandbox.ImageInfo{}, err
	}
	defer release()
	return m.inner.CreateImage(ctx, req, progress)
}

// admitImage checks a tenant's image request against the images there
// are and the tenant's caps, and reserves its place; release drops it.
func (m *Manager) admitImage(ctx context.Context, c sandbox.Caller, req sandbox.ImageRequest) (release func(), err error) {
	imgs, err := m.inner.Images(ctx)
	if err != nil {
		return nil, err
	}
	tenant := req.Tenant
	own, replacing := 0, false
	for _, im := range imgs {
		switch {
		case im.Name == req.Name && (im.Tenant == "" || im.Name == sandbox.DefaultImage):
			if req.Replace {
				return nil, fmt.Errorf("%w: image %s is the operator's; only the operator can replace it", sandbox.ErrForbidden, req.Name)
			}
			return nil, fmt.Errorf("%w: image %s is the operator's; pick another name", sandbox.ErrBusy, req.Name)
		case im.Tenant == "" || !c.Sees(im.Tenant):
			continue
		}
		own++
		if im.Name == req.Name {
			replacing = true
		}
	}
	if req.Recipe != nil && !sees(c, imgs, req.Recipe.Base) {
		return nil, fmt.Errorf("%w: no image %q to build on", sandbox.ErrInvalid, clipString(req.Recipe.Base, 128))
	}
	q := m.quotas(tenant)
	if q.DiskMiB > 0 {
		if err := m.diskRoom(ctx, tenant, "image"); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.state(tenant, q)
	if q.Images > 0 && !replacing && own+st.images+1 > q.Images {
		return nil, quotaf(time.Minute, "tenant %s has %d images (%d being made), its cap is %d (max_images); delete one first", tenant, own, st.images, q.Images)
	}
	st.images++
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		st.images--
	}, nil
}

// sees reports whether base ("" or "default": the daemon's own) is an
// image c sees.
func sees(c sandbox.Caller, imgs []sandbox.ImageInfo, base string) bool {
	if base == "" || base == sandbox.DefaultImage {
		return true
	}
	for _, im := range imgs {
		if im.Name == base && (im.Tenant == "" || c.Sees(im.Tenant)) {
			return true
		}
	}
	return false
}
