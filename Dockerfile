# One image for every service of docker-compose.yml: the sparklog broker, Spark's standalone
# master and worker (pyspark's own spark-class) and the jobs. Java 17 for Spark.
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       openjdk-17-jre-headless procps gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

# gcc compiles sparklog's Cython extensions (the record decoders) at the pip install.
# A regular (not editable) install: the jobs (python -m sparklog.jobs.<name>) and their
# default conf (package data) come with the package; SPARKLOG_CONF_DIR or --conf-dir may
# point to a mounted directory instead.
WORKDIR /opt/sparklog
COPY pyproject.toml setup.py constraints.txt README.md pyspark_sparklog.py ./
COPY sparklog ./sparklog
RUN pip install --no-cache-dir -c constraints.txt .

# Executors run the same interpreter (and so the same sparklog) as the driver.
ENV PYSPARK_PYTHON=python3 \
    PYSPARK_DRIVER_PYTHON=python3 \
    PYTHONUNBUFFERED=1
