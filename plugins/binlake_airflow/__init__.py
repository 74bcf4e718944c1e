"""Airflow side of binlake: the connections hook, the alert notifiers and the TaskFlow tasks the DAGs wire.

Importing this package must stay cheap (DAG files import it at parse time): no Spark, pandas, Arrow or Delta at
module level; the tasks import binlake's service functions when they run.
"""
