"""moto's server, with one thing moto does not do and EC2 does: an image
shared with another account (a launch permission naming it, or public)
is seen and launched from that account.

moto keeps every account's images apart (each account and region has its
own backend), so an image baked in a build account and shared with a
member account cannot be described, resolved or launched from the member
account there -- where EC2 does all three. This wraps moto's
`describe_images` (which RunInstances and every image lookup go through)
so that, as EC2 does:

- by id: an image another account owns is returned when its launch
  permissions name this account (or `all`); otherwise the same
  `InvalidAMIID.NotFound` as before;
- in a listing (no ids): images shared with this account are included,
  then `Owners` and the filters apply to them as to
  the account's own;
- tags: a shared image shows the viewer's own tags on it, never the
  owner's (EC2 keeps tags per account).

Only the owner may change a shared image's attributes (`AuthFailure`, as
EC2 answers). Nothing else is changed: what EC2 refuses, moto still
refuses. Started by
scripts/lib.sh's start_moto and by the tests' harness, with the same
arguments as moto_server.
"""

import sys

from moto.ec2.exceptions import EC2ClientError, InvalidAMIIdError
from moto.ec2.models import ec2_backends
from moto.ec2.models.amis import AmiBackend
from moto.ec2.utils import generic_filter
from moto.server import main


class SharedImage:
    """An image of another account as the viewer sees it: the owner's
    image in everything but its tags, which are the viewer's."""

    def __init__(self, ami, viewer):
        self._ami = ami
        self._viewer = viewer

    def __getattr__(self, name):
        return getattr(self._ami, name)

    def get_tags(self):
        return self._viewer.describe_tags(filters={"resource-id": [self._ami.id]})

    @property
    def tag_set(self):
        return self.get_tags()

    @property
    def tag_list(self):
        return self.get_tags()

    def get_filter_value(self, filter_name, method_name=None):
        if filter_name.startswith("tag:") or filter_name in ("tag-key", "tag-value"):
            tags = self.get_tags()
            if filter_name == "tag-key":
                return [t["key"] for t in tags]
            if filter_name == "tag-value":
                return [t["value"] for t in tags]
            key = filter_name[len("tag:"):]
            return next((t["value"] for t in tags if t["key"] == key), None)
        return self._ami.get_filter_value(filter_name, method_name)


def shared_with(viewer):
    """Images in other accounts' backends of the viewer's region whose
    launch permissions name the viewer's account or everyone."""
    me, region = viewer.account_id, viewer.region_name
    out = []
    for account, regions in list(ec2_backends.items()):
        if account == me:
            continue
        backend = regions.get(region) if hasattr(regions, "get") else None
        if backend is None:
            continue
        for ami in list(backend.amis.values()):
            if ami.owner_id != account:
                continue  # moto's public images, loaded into every account alike
            perms = ami.launch_permissions
            if {"UserId": me} in perms or {"Group": "all"} in perms:
                out.append(SharedImage(ami, viewer))
    return out


_original = AmiBackend.describe_images


def describe_images(self, ami_ids=None, filters=None, exec_users=None, owners=None):
    if ami_ids:
        try:
            own = _original(self, ami_ids=ami_ids, filters=filters)
        except InvalidAMIIdError:
            own = []
        found = {i.id for i in own}
        shared = [i for i in shared_with(self) if i.id in ami_ids and i.id not in found]
        if not own and not shared:
            if any(i in self.deleted_amis for i in ami_ids):
                return []  # moto's own answer for a deregistered id
            raise InvalidAMIIdError(ami_ids)
        return own + (generic_filter(filters, shared) if filters else shared)
    own = _original(self, filters=filters, exec_users=exec_users, owners=owners)
    shared = shared_with(self)
    if owners:
        names = [self.account_id if o == "self" else o for o in owners]
        shared = [i for i in shared if i.owner_id in names or i.owner_alias in names]
    if filters:
        shared = generic_filter(filters, shared)
    return own + shared


AmiBackend.describe_images = describe_images


class NotAuthorizedForImage(EC2ClientError):
    """What EC2 answers an account changing an image it does not own."""

    def __init__(self, ami_id):
        super().__init__("AuthFailure", f"Not authorized for image:{ami_id}")


_modify = AmiBackend.modify_image_attribute


def modify_image_attribute(self, ami_id, *args, **kwargs):
    # Only the owner changes an image's attributes (launch permissions
    # included), however it is seen.
    if ami_id not in self.amis and any(i.id == ami_id for i in shared_with(self)):
        raise NotAuthorizedForImage(ami_id)
    return _modify(self, ami_id, *args, **kwargs)


AmiBackend.modify_image_attribute = modify_image_attribute

if __name__ == "__main__":
    sys.argv[0] = "moto_server"
    sys.exit(main())
