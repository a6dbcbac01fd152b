#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Regenerate the build system (needs autoconf, automake, pkg-config).
exec autoreconf -fi
