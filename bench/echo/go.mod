module ringx/bench/echo

go 1.26.8

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0
	github.com/cloudwego/netpoll v0.7.2
	golang.org/x/sys v0.49.0
)

require (
	github.com/bytedance/gopkg v0.1.1 // indirect
	github.com/cloudwego/gopkg v0.1.4 // indirect
)
