"""What the Airflow tasks call (no Airflow imports here): discover, fetch, snapshot, the ingest stages run in a
child process, and the alert payloads. The DAGs in dags/ and the tasks in plugins/ only wire these together."""
