#!/bin/sh
# Regenerate the build system (needs autoconf, automake, pkg-config).
exec autoreconf -fi
