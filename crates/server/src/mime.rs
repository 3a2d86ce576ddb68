//! Content-Type from a file name's extension (the common part of nginx's mime.types).

pub fn content_type(path: &str) -> &'static str {
    let ext = match path.rsplit_once('.') {
        Some((_, e)) if !e.contains('/') => e,
        _ => return "application/octet-stream",
    };
    match ext.to_ascii_lowercase().as_str() {
        "html" | "htm" | "shtml" => "text/html",
        "css" => "text/css",
        "xml" => "text/xml",
        "txt" => "text/plain",
        "md" => "text/markdown",
        "csv" => "text/csv",
        "js" | "mjs" => "application/javascript",
        "json" => "application/json",
        "map" => "application/json",
        "wasm" => "application/wasm",
        "pdf" => "application/pdf",
        "zip" => "application/zip",
        "gz" | "tgz" => "application/gzip",
        "tar" => "application/x-tar",
        "gif" => "image/gif",
        "jpeg" | "jpg" => "image/jpeg",
        "png" => "image/png",
        "webp" => "image/webp",
        "avif" => "image/avif",
        "svg" | "svgz" => "image/svg+xml",
        "ico" => "image/x-icon",
        "bmp" => "image/x-ms-bmp",
        "woff" => "font/woff",
        "woff2" => "font/woff2",
        "ttf" => "font/ttf",
        "otf" => "font/otf",
        "mp3" => "audio/mpeg",
        "ogg" => "audio/ogg",
        "wav" => "audio/wav",
        "mp4" => "video/mp4",
        "webm" => "video/webm",
        "mpeg" | "mpg" => "video/mpeg",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn types() {
        assert_eq!(super::content_type("/a/b.HTML"), "text/html");
        assert_eq!(super::content_type("/x.tar.gz"), "application/gzip");
        assert_eq!(
            super::content_type("/dir.d/file"),
            "application/octet-stream"
        );
        assert_eq!(super::content_type("/noext"), "application/octet-stream");
    }
}
