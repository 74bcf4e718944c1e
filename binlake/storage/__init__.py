"""Object storage below the schema and source layers: OSS locations, settings and retries, and `OssTree` (a
`FileTree` over an OSS prefix, used by the DDL snapshot store). The errors are the sources' (`SourceError`,
`SourceConfigError`, re-exported by `binlake.sources.base`)."""
