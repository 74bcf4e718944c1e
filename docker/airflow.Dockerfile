# Airflow 3 with binlake installed (the DAGs and plugins are mounted from the project by docker-compose.yml).
# The version matches the `airflow` extra pinned in pyproject.toml.
FROM apache/airflow:3.3.2-python3.11

USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
# The shared /data volume (landing, lake) belongs to uid 50000, the user of this image and of binlake:dev.
RUN mkdir -p /data && chown 50000:0 /data && chmod 2775 /data

USER airflow
COPY --chown=airflow:root pyproject.toml README.md /opt/binlake/
COPY --chown=airflow:root binlake /opt/binlake/binlake
COPY --chown=airflow:root spark_jobs /opt/binlake/spark_jobs
COPY --chown=airflow:root plugins /opt/binlake/plugins
RUN pip install --no-cache-dir "/opt/binlake[spark]" "apache-airflow==3.3.2"
