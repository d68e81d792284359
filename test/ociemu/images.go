package ociemu

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Shapes of the default image catalogue, by architecture.
var (
	// X86Shapes are the x86_64 shapes the default x86 images boot on.
	X86Shapes = []string{"VM.Standard.E4.Flex", "VM.Standard.E5.Flex", "VM.Standard3.Flex", "VM.Standard2.1"}
	// ArmShapes are the aarch64 (Ampere) shapes the default aarch64
	// images boot on.
	ArmShapes = []string{"VM.Standard.A1.Flex", "VM.Standard.A2.Flex"}
)

// ImageID returns the OCID the emulator gives to a default image of that
// display name (stable across runs).
func ImageID(displayName string) string {
	sum := sha256.Sum256([]byte(displayName))
	return "ocid1.image.oc1.emu." + hex.EncodeToString(sum[:12])
}

// DefaultImages returns the catalogue Options.Images defaults to: Oracle
// Linux 9 and Ubuntu 24.04/22.04 platform images for x86_64 and aarch64,
// named as OCI names them (only the aarch64 names say "aarch64"), with two
// builds of Ubuntu 24.04 x86_64 so that "newest first" matters.
func DefaultImages() []Image {
	day := func(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 12, 0, 0, 0, time.UTC) }
	img := func(name, os, ver, arch string, created time.Time) Image {
		shapes := X86Shapes
		if arch == ArchAarch64 {
			shapes = ArmShapes
		}
		return Image{
			ID: ImageID(name), DisplayName: name, OperatingSystem: os, OperatingSystemVersion: ver,
			Architecture: arch, Shapes: append([]string(nil), shapes...), TimeCreated: created,
		}
	}
	return []Image{
		img("Oracle-Linux-9.4-2024.09.30-0", "Oracle Linux", "9", ArchX86_64, day(2024, 10, 2)),
		img("Oracle-Linux-9.4-aarch64-2024.09.30-0", "Oracle Linux", "9", ArchAarch64, day(2024, 10, 2)),
		img("Canonical-Ubuntu-24.04-2024.08.15-0", "Canonical Ubuntu", "24.04", ArchX86_64, day(2024, 8, 20)),
		img("Canonical-Ubuntu-24.04-2024.10.09-0", "Canonical Ubuntu", "24.04", ArchX86_64, day(2024, 10, 11)),
		img("Canonical-Ubuntu-24.04-aarch64-2024.10.09-0", "Canonical Ubuntu", "24.04", ArchAarch64, day(2024, 10, 11)),
		img("Canonical-Ubuntu-22.04-2024.10.04-0", "Canonical Ubuntu", "22.04", ArchX86_64, day(2024, 10, 7)),
		img("Canonical-Ubuntu-22.04-aarch64-2024.10.04-0", "Canonical Ubuntu", "22.04", ArchAarch64, day(2024, 10, 7)),
	}
}
