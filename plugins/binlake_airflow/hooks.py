"""Secrets for binlake from Airflow Connections: the MySQL login for DDL snapshots, the Alibaba Cloud AK/SK for
the RDS OpenAPI, the OSS AK/SK. The deployment config names the connection ids; nothing secret is in it."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseHook

from binlake.config import InstanceConfig


class BinlakeHook(BaseHook):
    """Resolves an instance's connections into what binlake's service functions take."""

    conn_name_attr = "conn_id"
    hook_name = "binlake"

    def __init__(self, instance: InstanceConfig) -> None:
        super().__init__()
        self.instance = instance

    def mysql_uri(self) -> str:
        """mysql://login:password@host:port/ from the instance's `mysql_conn_id` connection."""
        conn_id = self.instance.mysql_conn_id
        if not conn_id:
            raise ValueError(f"instance {self.instance.name}: `mysql_conn_id` is not set in the deployment config "
                             "(the DDL snapshot needs a MySQL connection)")
        conn = self.get_connection(conn_id)
        if not conn.host:
            raise ValueError(f"connection {conn_id}: host is empty")
        auth = quote(conn.login or "", safe="")
        if conn.password:
            auth += ":" + quote(conn.password, safe="")
        return f"mysql://{auth}@{conn.host}:{conn.port or 3306}/"

    def source_credentials(self) -> dict[str, Any]:
        """Keyword options for binlake.sources.open_source: the AK/SK pair (connection login/password) and
        whatever the connection's extra holds (region_id, endpoint, ...)."""
        source = self.instance.source
        conn_id = self.instance.aliyun_conn_id if source.startswith("rds:") else \
            self.instance.oss_conn_id if source.startswith("oss://") else None
        if conn_id is None:
            return {}
        conn = self.get_connection(conn_id)
        out: dict[str, Any] = dict(conn.extra_dejson or {})
        if conn.login:
            out["access_key_id"] = conn.login
        if conn.password:
            out["access_key_secret"] = conn.password
        if conn.host and "endpoint" not in out:  # the API endpoint host (https unless a scheme is given)
            host = conn.host if "://" in conn.host else f"https://{conn.host}"
            out["endpoint"] = host + (f":{conn.port}" if conn.port else "")
        return out
