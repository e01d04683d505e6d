"""Writes a docker-archive image of the machine's static busybox.

    python3 busybox-image.py NAME:TAG OUT.tar

No registry is reachable here, so the one-node cluster (testkit/node-up)
imports this into containerd: it is the pods' image and the pause image
(its default command sleeps). Every busybox applet is a link in /bin.
"""

import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile

name, out = sys.argv[1], sys.argv[2]
busybox = shutil.which("busybox")
applets = subprocess.run([busybox, "--list"], check=True, capture_output=True, text=True).stdout.split()

layer = io.BytesIO()
with tarfile.open(fileobj=layer, mode="w") as tar:
    for d in ["bin", "etc", "tmp", "root"]:
        info = tarfile.TarInfo(d)
        info.type = tarfile.DIRTYPE
        info.mode = 0o1777 if d == "tmp" else 0o755
        tar.addfile(info)
    tar.add(busybox, "bin/busybox")
    for applet in applets:
        if applet == "busybox":
            continue
        info = tarfile.TarInfo("bin/" + applet)
        info.type = tarfile.SYMTYPE
        info.linkname = "busybox"
        tar.addfile(info)
    passwd = b"root:x:0:0:root:/root:/bin/sh\n"
    info = tarfile.TarInfo("etc/passwd")
    info.size = len(passwd)
    tar.addfile(info, io.BytesIO(passwd))
layer_bytes = layer.getvalue()

config = json.dumps({
    "architecture": "amd64",
    "os": "linux",
    "config": {"Env": ["PATH=/bin"], "Cmd": ["/bin/sleep", "1000000000"]},
    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer_bytes).hexdigest()]},
}).encode()
config_name = hashlib.sha256(config).hexdigest() + ".json"
manifest = json.dumps([{"Config": config_name, "RepoTags": [name], "Layers": ["layer.tar"]}]).encode()

with tarfile.open(out, "w") as tar:
    for path, data in [("layer.tar", layer_bytes), (config_name, config), ("manifest.json", manifest)]:
        info = tarfile.TarInfo(path)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
