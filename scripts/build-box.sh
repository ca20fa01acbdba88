#!/usr/bin/env bash
# Build the lab VM's Vagrant box locally (no download site): Debian 12 from the Debian mirror
# with mmdebstrap, a BIOS/GRUB disk as qcow2, packaged for the libvirt provider and added to
# Vagrant as $CC_TESTBED_BOX_NAME (default cc-testbed/bookworm).
#
# The box already carries the packages of playbooks/roles/tools, what the congestion-control
# module role needs (DKMS, headers), the module itself built by DKMS for the box's kernel, and a
# virtualenv with requirements.lock installed: installing them here runs at native speed, while the
# same apt, pip and compiler runs inside a TCG VM take many minutes (pip alone: 8 min measured; the
# module about 5). Provisioning still checks every one of them.
#
# Usage: scripts/build-box.sh [--if-missing|--if-stale]   (root; --if-missing: do nothing when the
#        box is already added, saying so when it was built from another recipe; --if-stale: build
#        unless the box added is this recipe's, as the vagrant test tier wants it)
# Writes: ~/.cache/cc-testbed/box/{cc-testbed-bookworm.box,box-info.json,build.log}
set -euo pipefail
cd "$(dirname "$0")/.."

box_name=${CC_TESTBED_BOX_NAME:-cc-testbed/bookworm}
mirror=${CC_TESTBED_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${CC_TESTBED_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
disk_gb=${CC_TESTBED_BOX_DISK_GB:-16}
out=${XDG_CACHE_HOME:-$HOME/.cache}/cc-testbed/box
box_file=$out/${box_name//\//-}.box

fail() { echo "build-box: $*" >&2; exit 1; }

# The recipe's identity: this script and the package list. A box built from another recipe is rebuilt.
# one package per "  - name" line of a role's *_packages list
packages_of() { sed -n "/^$2:/,/^[^ ]/s/^  - \([a-z0-9.+-]*\).*/\1/p" "$1" | tr '\n' ' '; }
tools=$(packages_of playbooks/roles/tools/defaults/main.yml tools_packages)
module_pkgs=$(packages_of playbooks/roles/cc_module/defaults/main.yml cc_module_packages)
# the module's sources, as the cc_module role lists them (cc_module_files): the box carries their DKMS build
module_files=$(sed -n '/^cc_module_files:/,/^[^ ]/s/^  - \([A-Za-z0-9._-]*\).*/\1/p' playbooks/roles/cc_module/defaults/main.yml)
module_version=$(cat kernel-patch/VERSION)
# the CA certificates this host's administrator added (HTTPS proxies): the tools role copies them into
# the VM, whose update-ca-certificates then takes 90 s under TCG; the box carries them already
ca_dir=/usr/local/share/ca-certificates
ca_certs=$(find "$ca_dir" -maxdepth 1 -name '*.crt' 2>/dev/null | sort)
recipe=$(cat "$0" playbooks/roles/tools/defaults/main.yml playbooks/roles/cc_module/defaults/main.yml requirements.lock \
  pyproject.toml $(printf 'kernel-patch/%s ' $module_files) $ca_certs | sha256sum | cut -c1-16)
# The project's Python dependencies, installed into the box (the testbed role's testbed_venv in the VM).
box_venv=/opt/cc-testbed/venv

# Vagrant commands run outside the project: here they must not load its Vagrantfile (which calls this script).
vagrant_() { (cd / && vagrant "$@"); }

if [ "${1:-}" = "--if-missing" ] || [ "${1:-}" = "--if-stale" ]; then
  if vagrant_ box list 2>/dev/null | grep -q "^$box_name "; then
    if grep -q "\"recipe\": \"$recipe\"" "$out/box-info.json" 2>/dev/null; then
      echo "build-box: $box_name is already added (recipe $recipe): nothing to do"
      exit 0
    elif [ "$1" = "--if-missing" ]; then
      echo "build-box: $box_name is added but was built from another recipe; 'make box' rebuilds it" \
        "(a VM made from the old one keeps it until 'vagrant destroy')"
      exit 0
    fi
    echo "build-box: $box_name is added but was built from another recipe: building recipe $recipe"
  fi
fi

[ "$(id -u)" = 0 ] || fail "building a disk image needs root (loop devices, mount, chroot): run 'sudo make box'"
for tool in mmdebstrap sfdisk losetup partx mkfs.ext4 qemu-img vagrant; do
  command -v "$tool" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$tool" >/dev/null 2>&1 \
    || fail "$tool is missing: run 'make setup' (apt: mmdebstrap fdisk util-linux e2fsprogs qemu-utils vagrant)"
done
insecure_key=$(find /usr/share/rubygems-integration /opt/vagrant /usr/lib/ruby -path '*vagrant*/keys/vagrant.pub' \
  2>/dev/null | head -1 || true)
[ -n "$insecure_key" ] || fail "Vagrant's insecure public key (keys/vagrant.pub) was not found: is vagrant installed?"

mkdir -p "$out"
work=$(mktemp -d "$out/build.XXXXXX")
loop="" mnt="$work/mnt"
cleanup() {
  set +e
  if mountpoint -q "$mnt"; then
    for sub in dev/pts dev proc sys; do umount "$mnt/$sub" 2>/dev/null; done
    umount "$mnt"
  fi
  if [ -n "$loop" ]; then
    partx -d "$loop" 2>/dev/null
    losetup -d "$loop"
    rm -f "${loop}p1"
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
started=$(date +%s)
log=$out/build.log
: > "$log"
step() { echo "build-box: [$(( $(date +%s) - started )) s] $*"; }

step "mmdebstrap: Debian 12 with $tools$module_pkgs(log: $log)"
# python3-apt: Ansible's apt module needs it (without it, the first provisioning installs it: a minute)
base=systemd-sysv,udev,kmod,initramfs-tools,linux-image-amd64,grub-pc,openssh-server,sudo,python3,python3-apt
base=$base,iproute2,ifupdown,isc-dhcp-client,rsync,procps,less,ca-certificates
packages=$base,$(echo "$tools $module_pkgs" | tr -s ' ' ',' | sed 's/,$//')
# the package lists stay: the tools role's apt cache is then fresh (a day) and not fetched again in the VM
mmdebstrap --variant=minbase --include="$packages" --skip=cleanup/apt/lists \
  --components=main bookworm "$work/rootfs.tar" \
  "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
  "deb $security_mirror bookworm-security main" >>"$log" 2>&1 \
  || fail "mmdebstrap failed (is $mirror reachable?); the last lines of $log:
$(tail -15 "$log")"

step "disk image (${disk_gb} GB sparse, one ext4 partition)"
raw=$work/disk.raw
truncate -s "${disk_gb}G" "$raw"
echo 'start=2048, type=83, bootable' | sfdisk -q "$raw"
loop=$(losetup --show -f -P "$raw")
# Without udev nobody creates the partition's device node: add it through BLKPG and mknod.
dev=${loop#/dev/}
[ -e "/sys/block/$dev/${dev}p1" ] || partx -a "$loop"
if [ ! -b "${loop}p1" ]; then
  IFS=: read -r major minor < "/sys/block/$dev/${dev}p1/dev"
  mknod "${loop}p1" b "$major" "$minor"
fi
mkfs.ext4 -q -L root "${loop}p1"
uuid=$(blkid -s UUID -o value "${loop}p1")
mkdir -p "$mnt"
mount "${loop}p1" "$mnt"
tar -C "$mnt" -xpf "$work/rootfs.tar"
rm "$work/rootfs.tar"

step "configure: vagrant user, ssh, DHCP on eth0, serial console"
echo cc-testbed > "$mnt/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 cc-testbed\n' > "$mnt/etc/hosts"
echo "UUID=$uuid / ext4 errors=remount-ro 0 1" > "$mnt/etc/fstab"
printf 'auto lo\niface lo inet loopback\nallow-hotplug eth0\niface eth0 inet dhcp\n' > "$mnt/etc/network/interfaces"
mount --bind /dev "$mnt/dev"
mount --bind /dev/pts "$mnt/dev/pts"
mount -t proc proc "$mnt/proc"
mount -t sysfs sys "$mnt/sys"
chroot "$mnt" /bin/bash -euc '
  useradd -m -s /bin/bash -G sudo vagrant
  echo vagrant:vagrant | chpasswd
  echo "vagrant ALL=(ALL) NOPASSWD:ALL" > /etc/sudoers.d/vagrant
  chmod 440 /etc/sudoers.d/vagrant
  install -d -m 700 -o vagrant -g vagrant /home/vagrant/.ssh
  systemctl enable ssh.service networking.service serial-getty@ttyS0.service >/dev/null 2>&1
'
install -m 600 -o 1000 -g 1000 "$insecure_key" "$mnt/home/vagrant/.ssh/authorized_keys"
echo 'UseDNS no' > "$mnt/etc/ssh/sshd_config.d/cc-testbed.conf"
# GRUB on the serial console; update-grub (run by the kernel role when it installs another
# kernel) regenerates grub.cfg from these settings. tsc=reliable: under TCG a guest with two
# vCPUs otherwise finds the TSC unstable and falls back to a slow, erratic clocksource
# (MACHINE.md); with KVM the kvm-clock is used either way.
cat > "$mnt/etc/default/grub" <<'EOF'
GRUB_DEFAULT=0
GRUB_TIMEOUT=1
GRUB_DISTRIBUTOR=Debian
GRUB_CMDLINE_LINUX="console=tty0 console=ttyS0,115200 net.ifnames=0 biosdevname=0 tsc=reliable"
GRUB_TERMINAL="serial console"
GRUB_SERIAL_COMMAND="serial --unit=0 --speed=115200"
GRUB_DISABLE_OS_PROBER=true
EOF
chroot "$mnt" grub-install --target=i386-pc --modules="part_msdos ext2" "$loop" >>"$log" 2>&1
kernel=$(ls "$mnt/boot" | sed -n 's/^vmlinuz-//p' | sort -V | tail -1)
# grub-mkconfig cannot probe a loop device from a chroot: the first grub.cfg is written here.
cat > "$mnt/boot/grub/grub.cfg" <<EOF
set timeout=1
serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
insmod part_msdos
insmod ext2
search --no-floppy --fs-uuid --set=root $uuid
menuentry 'Debian GNU/Linux, with Linux $kernel' {
  linux /boot/vmlinuz-$kernel root=UUID=$uuid ro console=tty0 console=ttyS0,115200 net.ifnames=0 biosdevname=0 tsc=reliable
  initrd /boot/initrd.img-$kernel
}
EOF
step "the project's Python dependencies (requirements.lock) in $box_venv"
# pip in the chroot trusts what this host trusts (HTTPS proxies); resolv.conf only for the build
cp requirements.lock "$mnt/tmp/requirements.lock"
cp /etc/ssl/certs/ca-certificates.crt "$mnt/tmp/build-ca.crt"
cp -L /etc/resolv.conf "$mnt/etc/resolv.conf"
chroot "$mnt" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root PIP_CERT=/tmp/build-ca.crt \
  PIP_DISABLE_PIP_VERSION_CHECK=1 /bin/sh -euc "
    python3 -m venv --system-site-packages $box_venv
    $box_venv/bin/pip install -q -r /tmp/requirements.lock
    $box_venv/bin/pip uninstall -q -y setuptools
    cp /tmp/requirements.lock $box_venv/.requirements.lock
  " >>"$log" 2>&1 || fail "pip install -r requirements.lock in the box failed; the last lines of $log:
$(tail -15 "$log")"

# The project itself, installed in editable mode from /vagrant (the synced folder) as the testbed role
# installs it: pip builds the editable wheel natively here (107 s in the TCG VM). The copy is removed;
# `vagrant up` syncs the checkout there, and the role checks that `testbed` imports from it.
step "the testbed package, editable from /vagrant"
rsync -a --exclude=.git --exclude=.venv --exclude=.vagrant --exclude=/results --exclude=/bench \
  --exclude='*.egg-info' --exclude=__pycache__ ./ "$mnt/vagrant/"
chroot "$mnt" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root PIP_CERT=/tmp/build-ca.crt \
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$box_venv/bin/pip" install -q --no-deps -e /vagrant >>"$log" 2>&1 \
  || fail "pip install -e of the project in the box failed; the last lines of $log:
$(tail -15 "$log")"
rm -rf "$mnt/vagrant"
rm -f "$mnt/tmp/requirements.lock" "$mnt/tmp/build-ca.crt" "$mnt/etc/resolv.conf"

if [ -n "$ca_certs" ]; then
  step "this host's added CA certificates ($ca_dir), trusted in the box"
  install -m 644 $ca_certs "$mnt$ca_dir/"
  chroot "$mnt" update-ca-certificates >>"$log" 2>&1
fi

# The module built by DKMS here, natively, for the box's kernel: the cc_module role finds the same
# sources already in /usr/src and the build installed, so `vagrant up` does not compile it under TCG
# (about 5 of the first provisioning's 7 minutes). Changed sources change the recipe (a new box), and
# a VM whose sources differ from its box's is rebuilt by the role as before.
step "the congestion-control module (kernel-patch/, DKMS) for $kernel"
module_src=$mnt/usr/src/tcp-westwood-tb-$module_version
install -d -m 755 "$module_src"
for f in $module_files; do cp -p "kernel-patch/$f" "$module_src/$f"; done
chroot "$mnt" dkms install -m tcp-westwood-tb -v "$module_version" -k "$kernel" >>"$log" 2>&1 \
  || fail "dkms install of kernel-patch/ for $kernel in the box failed; the last lines of $log:
$(tail -15 "$log")"

mkdir -p "$mnt/etc/cc-testbed"
cat > "$mnt/etc/cc-testbed/box.json" <<EOF
{"box": "$box_name", "kernel": "$kernel", "recipe": "$recipe", "built_utc": "$(date -u +%Y-%m-%dT%H:%M:%SZ)"}
EOF
chroot "$mnt" apt-get clean
sync
for sub in dev/pts dev proc sys; do umount "$mnt/$sub"; done
umount "$mnt"
partx -d "$loop" 2>/dev/null || true
losetup -d "$loop"
rm -f "${loop}p1"
loop=""

step "qcow2 and the box file"
mkdir -p "$work/box"
# zstd clusters, written out of order by several coroutines: about 4 times faster than zlib's (110 s
# for this image here) and smaller; qemu reads them since 5.1
qemu-img convert -c -O qcow2 -o compression_type=zstd -W -m 4 "$raw" "$work/box/box.img"
rm "$raw"
printf '{"provider": "libvirt", "format": "qcow2", "virtual_size": %s}\n' "$disk_gb" > "$work/box/metadata.json"
cat > "$work/box/Vagrantfile" <<'EOF'
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |libvirt|
    libvirt.disk_bus = "virtio"
  end
end
EOF
tar -C "$work/box" -cf "$box_file.tmp" metadata.json Vagrantfile box.img
mv "$box_file.tmp" "$box_file"

step "vagrant box add $box_name"
vagrant_ box add --force --name "$box_name" "$box_file" >>"$log" 2>&1 \
  || fail "vagrant box add failed; the last lines of $log:
$(tail -15 "$log")"
cat > "$out/box-info.json" <<EOF
{"box": "$box_name", "file": "$box_file", "kernel": "$kernel", "recipe": "$recipe",
 "built_utc": "$(date -u +%Y-%m-%dT%H:%M:%SZ)", "build_s": $(( $(date +%s) - started ))}
EOF
step "done: $box_name (kernel $kernel) from $box_file; recorded in $out/box-info.json"
