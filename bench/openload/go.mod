module openload

go 1.19
