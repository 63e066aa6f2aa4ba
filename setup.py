"""The compiled parts: Cython extensions for the hot loops over records (record batch v2).

Each is optional: when no C compiler is there, the build warns and goes on, and sparklog
runs on its pure Python fallbacks (the log cleaner's offset map, aiokafka's decoder for the
Spark source). Metadata and everything else is in pyproject.toml.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

EXTENSIONS = [
    Extension("sparklog.record._columns", ["sparklog/record/_columns.pyx"], optional=True),
    Extension("sparklog.storage._offset_map", ["sparklog/storage/_offset_map.pyx"],
              optional=True),
]

setup(ext_modules=cythonize(EXTENSIONS, language_level=3))
