"""Build of the C parts: the spike._spike extension, which compiles the nkrt
runtime sources (runtime/src) together with its CPython binding (spike/*.c)."""
import glob

from setuptools import Extension, setup

RUNTIME_SOURCES = sorted(glob.glob("runtime/src/*.c"))
SPIKE_SOURCES = sorted(glob.glob("spike/*.c"))
# the binding's private header: a change rebuilds every spike/*.c
SPIKE_HEADERS = sorted(glob.glob("spike/*.h"))

setup(
    ext_modules=[
        Extension(
            "spike._spike",
            sources=RUNTIME_SOURCES + SPIKE_SOURCES,
            depends=SPIKE_HEADERS,
            # runtime/src is not on the path: its sources find their headers beside
            # them, and the binding sees only the public API (runtime/include)
            include_dirs=["runtime/include"],
            define_macros=[("_GNU_SOURCE", "1")],
            extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror",
                                "-fvisibility=hidden"],
            libraries=["dl", "pthread"],
        )
    ]
)
