#!/usr/bin/python3
"""An OCI image archive of one layer, for `ctr images import`, without a registry or podman.

    mkimage.py ROOTFS.tar NAME:TAG OUT.tar [ENTRYPOINT...]

scripts/k8s.sh makes the pod sandbox ("pause") image with it. The archive is reproducible:
the same ROOTFS.tar gives the same digests.
"""

import gzip
import hashlib
import io
import json
import sys
import tarfile


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def main() -> None:
    rootfs, name, out, entrypoint = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    with open(rootfs, "rb") as f:
        raw = f.read()
    layer = gzip.compress(raw, compresslevel=6, mtime=0)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            **({"Entrypoint": entrypoint} if entrypoint else {}),
        },
        "rootfs": {"type": "layers", "diff_ids": [digest(raw)]},
        "history": [{"created_by": "scripts/k8s/mkimage.py"}],
    }
    config_blob = json.dumps(config, sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": digest(config_blob),
            "size": len(config_blob),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": digest(layer),
                "size": len(layer),
            }
        ],
    }
    manifest_blob = json.dumps(manifest, sort_keys=True).encode()
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": digest(manifest_blob),
                "size": len(manifest_blob),
                # ctr names the image after io.containerd.image.name.
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                },
            }
        ],
    }
    with tarfile.open(out, "w") as archive:

        def add(path: str, data: bytes) -> None:
            info = tarfile.TarInfo(path)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))

        add("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        add("index.json", json.dumps(index, sort_keys=True).encode())
        for blob in (config_blob, manifest_blob, layer):
            add("blobs/sha256/" + digest(blob)[len("sha256:") :], blob)


if __name__ == "__main__":
    main()
